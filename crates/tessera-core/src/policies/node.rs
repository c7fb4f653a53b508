//! The node policy: the papers' mechanisms composed for a shared node, each the
//! existing code run over one board instead of a board of its own.
//!
//! - **User-facing tenants** get Flexy's elastic pool ([`ElasticPool`]: U from
//!   Little's law, the minimum reservation K, packing, F-Reset's resets when
//!   configured). A pool GPU runs user-facing tasks only, the oldest head first, as in
//!   [`super::flexy::Flexy`].
//! - **Batch tenants** each live on one *home* GPU outside the pool, as a process's
//!   context does: DCUDA's placement (the least-loaded GPU by the [`Monitor`]'s
//!   demand, ties to the fewest tenants), and DCUDA's step 1 and step 2 ([`dcuda::balance`],
//!   [`dcuda::compact`]) every interval over the GPUs outside the pool, migrating a tenant
//!   between its tasks. A GPU's load is its tenants' share of its *time* (one task
//!   runs at a time: [`Monitor::started_exclusive`]); time a tenant waits for its turn
//!   is held, not idle.
//! - **Which batch tenant runs** on a free GPU outside the pool is FairGV's start-time
//!   fair queuing ([`FairQueue`]), hierarchical: Slurm jobs (groups) and lone tenants
//!   by weight, then a job's tenants by their weight within it, among the tenants
//!   whose home that GPU is.
//! - **Weighted shares across GPUs** (the node policy's own step, after DCUDA's:
//!   [`NodeParams::even_shares`]): one tenant at a time moves from the GPU outside
//!   the pool whose contending tenants weigh the most to where the move evens the
//!   summed weights, since fair queuing gives each tenant its weight over its GPU's
//!   summed weight. DCUDA's step 1 balances load, and with every tenant backlogged it
//!   moves nothing.
//! - **A steady pool** ([`NodeParams::steady_pool`]): Flexy's pool takes GPUs where no
//!   batch tenant lives before the others, and tenants leave only GPUs the pool has
//!   held for an interval: a task leaves nothing behind, a context does.
//! - **Room for a large tenant** (the node policy's own, [`NodeParams::make_room`]):
//!   a tenant that fits on no GPU has small tenants moved off one GPU until it fits.
//! - **Memory** (schedGPU's rule, every allocation admitted before it is used): a
//!   batch tenant is homed only on a GPU whose homed tenants' declared memory, with the
//!   user-facing tenants' (kept free everywhere, since the pool may take any GPU),
//!   leaves room for its own, and moved only where it fits; a tenant that fits nowhere waits
//!   unplaced until memory frees (its tasks wait, none fails). The daemon's ledger
//!   admits each task's memory on top, as for every policy. A service that registers
//!   after batch tenants filled a GPU finds that GPU *over-committed*: the pool takes
//!   it last; there it serves only the services whose context fits beside the homes
//!   and the services already living there (a service's context stays where it ran),
//!   and while no waiting request fits, the GPU runs its batch tenants' work rather
//!   than idle; the room step moves batch tenants off it where they fit elsewhere.
//! - **Registered inference models** ([`NodePolicy::with_inference`]) are served by
//!   gpu-lets' adaptive server ([`AdaptiveGpulets`]) on partitions of GPUs kept from
//!   the pool and from homes; its actions on a GPU where the node's tasks still run
//!   wait until those have finished.
//! - **Slurm jobs** are accepted: a job's tenant lives on its job's first GPU and moves
//!   only among the job's GPUs. The pool may take a job's GPU while the user-facing
//!   load needs it, as it takes any batch GPU; the job waits meanwhile (Flexy's
//!   precedence), and gets it back when the pool shrinks to K.
//!
//! What the composition costs, by construction: a pool that grows over a batch tenant's
//! home holds that tenant until the pool shrinks or the next interval moves it (a
//! migration's pause); fair shares hold among the tenants of one GPU, and across GPUs
//! only as far as whole tenants even out the summed weights. `tessera sim node`
//! measures each part by switching it off ([`NodeParams`]' switches).

use crate::action::Action;
use crate::board::{Board, Classes};
use crate::event::Event;
use crate::ids::TaskId;
use crate::ids::{GpuId, TenantId};
use crate::model::{GpuSpec, ServiceClass};
use crate::policies::dcuda::{self, Loads, Monitor, Move, MoveReason};
use crate::policies::fair::FairQueue;
use crate::policies::flexy::{ElasticPool, FlexyParams};
use crate::policies::gpulets::AdaptiveGpulets;
use crate::policy::Policy;
use crate::units::{Bytes, Nanos};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

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

/// The share step moves a tenant only when that raises the lowest share per unit of
/// weight by more than this fraction: a move pauses the tenant, so a small gain is not
/// worth it, and it keeps two near-equal GPUs from trading a tenant back and forth.
const SHARES_HYSTERESIS: f64 = 0.1;

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

/// The composed node policy (see the module documentation).
#[derive(Debug)]
pub struct NodePolicy {
    board: Board,
    params: NodeParams,
    pool: ElasticPool,
    batch: FairQueue,
    monitor: Monitor,
    /// Each placed batch tenant's home GPU.
    homes: BTreeMap<TenantId, GpuId>,
    /// Declared memory of the tenants homed on each GPU, and of each batch tenant (kept
    /// here: the board forgets a tenant before the policy hears that it left).
    homed_memory: Vec<Bytes>,
    declared: BTreeMap<TenantId, Bytes>,
    /// Each user-facing tenant's declared memory, kept free on every GPU: the pool may
    /// take any GPU, and a service's context lives on each pool GPU it runs on.
    services: BTreeMap<TenantId, Bytes>,
    /// Their sum, and the batch tenants homed on each GPU (kept at each change: they
    /// are read on every event).
    services_memory: u64,
    /// Per GPU, the user-facing tenants whose context lives there (a task of theirs
    /// ran there; until they leave): where the batch tenants homed on a GPU leave no
    /// room for every service, a request runs there only if its own context fits.
    service_on: Vec<Vec<TenantId>>,
    homed_on: Vec<BTreeSet<TenantId>>,
    /// Batch tenants waiting for a GPU with room for their memory, in arrival order.
    unplaced: Vec<TenantId>,
    /// Moves decided, waiting for the tenant to be between tasks.
    moving: BTreeMap<TenantId, (GpuId, MoveReason)>,
    /// When each tenant last arrived somewhere by a migration.
    arrived: BTreeMap<TenantId, Nanos>,
    next_sample: Nanos,
    report: NodeReport,
    shared: Option<Arc<Mutex<NodeReport>>>,
    /// The balancer's part, in DCUDA's form, for displays that show DCUDA's.
    balance_shared: Option<Arc<Mutex<dcuda::DcudaReport>>>,
    samples: u64,
    /// Registered inference models, served on gpu-lets ([`NodePolicy::with_inference`]).
    inference: Option<Inference>,
    /// Since when each GPU has been the pool's.
    pool_since: Vec<Option<Nanos>>,
    /// The pool's generation `pool_since` was last brought up to.
    pool_seen: u64,
    /// The pool's order among GPUs with contending batch tenants, as of the last
    /// sample ([`NodeParams::fair_pool`]; all 0 without it).
    lead_rank: Vec<u8>,
    /// Each GPU's rank for the pool ([`NodePolicy::pool_ranks`]), kept between events:
    /// recomputed for the GPUs in `ranks_stale`, or for all when `ranks_all_stale`
    /// (a walk of the node on every event was a third of the policy's time at 100x
    /// its node, issue 55).
    ranks: Vec<u8>,
    /// How many GPUs rank above 0 (none: Flexy's own order).
    ranked: usize,
    /// GPUs whose rank may have changed since the last event: their homes, their
    /// contention.
    ranks_stale: Vec<GpuId>,
    /// Every GPU's rank may have changed: the services, a sample, the moves, the
    /// inference server's GPUs.
    ranks_all_stale: bool,
    /// The moves (tenant, target) the ranks were computed with: a move promises its
    /// target memory ([`NodePolicy::committed`]).
    ranks_moving: Vec<(TenantId, GpuId)>,
    /// Per GPU: whether a batch tenant homed there contends ([`NodePolicy::contends`]),
    /// kept up to date from the board's log of tenants whose backlog changed, the
    /// homes and the monitor's samples: asking every homed tenant of every GPU on each
    /// event was most of the policy's time at 100x its node (issue 55).
    contended: Vec<bool>,
    /// Scratch: the tenants the board logged.
    changed: Vec<TenantId>,
}

/// Moves a step has decided, with the summed weights and promised memory they leave.
struct Planned {
    /// Summed weight per GPU, the moves applied.
    summed: Vec<f64>,
    /// Declared memory the moves bring to each GPU.
    promised: Vec<u64>,
    moves: Vec<Move>,
}

impl Planned {
    fn new(summed: Vec<f64>) -> Planned {
        let n = summed.len();
        Planned { summed, promised: vec![0; n], moves: Vec::new() }
    }

    /// Decide `m`, of a tenant of `weight` declaring `bytes`.
    fn add(&mut self, m: Move, weight: f64, bytes: u64) {
        self.summed[m.from.0 as usize] -= weight;
        self.summed[m.to.0 as usize] += weight;
        self.promised[m.to.0 as usize] += bytes;
        self.moves.push(m);
    }
}

/// Tells whether a user-facing tenant registering now serves a registered model.
pub type IsModel = Box<dyn Fn(TenantId) -> bool + Send>;

/// The gpu-lets server inside the node policy, and what the node routes to it.
struct Inference {
    server: AdaptiveGpulets,
    is_model: IsModel,
    /// The tenants that serve models, and their tasks not yet finished.
    models: BTreeSet<TenantId>,
    tasks: BTreeSet<TaskId>,
    /// The server's actions on a GPU where the node's own tasks still run, held until
    /// they have finished (a GPU joins the server's while busy with others' work).
    held: Vec<Action>,
    /// Per GPU, whether the server uses it ([`AdaptiveGpulets::gpus_in_use`]).
    in_use: Vec<bool>,
}

impl std::fmt::Debug for Inference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inference")
            .field("server", &self.server)
            .field("models", &self.models)
            .field("held", &self.held.len())
            .field("in_use", &self.in_use)
            .finish_non_exhaustive()
    }
}

/// Which policy an event is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Node,
    Server,
    Both,
}

impl Inference {
    /// Route `event`, learning the models and their tasks as they come.
    fn route(&mut self, event: &Event) -> Route {
        let model = |t: &TenantId| self.models.contains(t);
        match event {
            Event::TenantRegistered(spec) => {
                if spec.class.is_user_facing() && (self.is_model)(spec.id) {
                    self.models.insert(spec.id);
                    Route::Server
                } else {
                    Route::Node
                }
            }
            Event::TenantLeft { tenant } => {
                if self.models.remove(tenant) {
                    Route::Server
                } else {
                    Route::Node
                }
            }
            Event::TaskSubmitted(t) if model(&t.tenant) => {
                self.tasks.insert(t.id);
                Route::Server
            }
            Event::TaskFinished { task, .. } if self.tasks.remove(task) => Route::Server,
            Event::TaskCancelRequested { task, .. } if self.tasks.contains(task) => Route::Server,
            Event::MemoryRequested { tenant, .. }
            | Event::MemoryFreed { tenant, .. }
            | Event::TenantWeightChanged { tenant, .. }
            | Event::TenantCharged { tenant, .. }
                if model(tenant) =>
            {
                Route::Server
            }
            Event::RepartitionDone { .. } | Event::RepartitionFailed { .. } => Route::Server,
            Event::ActionRefused { action, .. } => match action.as_ref() {
                Action::DispatchBatch { .. } | Action::Repartition { .. } => Route::Server,
                Action::Dispatch { task, .. } if self.tasks.contains(task) => Route::Server,
                _ => Route::Node,
            },
            Event::Tick => Route::Both,
            _ => Route::Node,
        }
    }
}

impl NodePolicy {
    /// The node policy over `gpus`.
    pub fn new(gpus: &[GpuSpec], params: NodeParams) -> NodePolicy {
        let mut node = NodePolicy {
            board: Board::new(gpus).with_head_index().with_free_order().with_change_log(),
            params,
            pool: ElasticPool::new(gpus.len(), params.flexy),
            batch: FairQueue::new(params.spin),
            monitor: Monitor::default(),
            homes: BTreeMap::new(),
            homed_memory: vec![Bytes(0); gpus.len()],
            declared: BTreeMap::new(),
            services: BTreeMap::new(),
            services_memory: 0,
            service_on: vec![Vec::new(); gpus.len()],
            homed_on: vec![BTreeSet::new(); gpus.len()],
            unplaced: Vec::new(),
            moving: BTreeMap::new(),
            arrived: BTreeMap::new(),
            next_sample: params.interval,
            report: NodeReport::default(),
            shared: None,
            balance_shared: None,
            samples: 0,
            inference: None,
            pool_since: vec![None; gpus.len()],
            pool_seen: 0,
            lead_rank: vec![0; gpus.len()],
            ranks: vec![0; gpus.len()],
            ranked: 0,
            ranks_stale: Vec::new(),
            ranks_all_stale: true,
            ranks_moving: Vec::new(),
            contended: vec![false; gpus.len()],
            changed: Vec::new(),
        };
        // no service registered yet
        node.services_changed();
        node
    }

    /// Serve registered inference models on gpu-lets (gpu-lets' elastic partitioning,
    /// batching and rescheduling: `server`, built over the same GPUs) inside the
    /// user-facing share of the node: a user-facing tenant for which `is_model` holds
    /// when it registers is the server's, every other tenant the node's. The GPUs the
    /// server uses ([`AdaptiveGpulets::gpus_in_use`]) are kept from Flexy's pool (taken
    /// last) and from batch homes (tenants there move off as from the pool's); a
    /// server's dispatch or repartition on a GPU where the node's tasks still run waits
    /// until they have finished.
    pub fn with_inference(mut self, server: AdaptiveGpulets, is_model: IsModel) -> NodePolicy {
        let n = self.board.gpu_count();
        self.inference = Some(Inference {
            server,
            is_model,
            models: BTreeSet::new(),
            tasks: BTreeSet::new(),
            held: Vec::new(),
            in_use: vec![false; n],
        });
        self
    }

    /// Whether the inference server uses `gpu`.
    fn serves_models(&self, gpu: GpuId) -> bool {
        self.inference.as_ref().is_some_and(|i| i.in_use.get(gpu.0 as usize) == Some(&true))
    }

    /// Whether the pool should take `gpu` only when it must: its batch tenants' memory
    /// leaves no room for the services', or the inference server uses it.
    fn shunned(&self, gpu: GpuId) -> bool {
        self.overcommitted(gpu) || self.serves_models(gpu)
    }

    /// The order in which the pool takes GPUs: shunned ones last; with
    /// [`NodeParams::steady_pool`], GPUs where no contending batch tenant lives before
    /// the others, and among those others, with [`NodeParams::fair_pool`], the one
    /// whose tenants are furthest ahead first; Flexy's order within each (which keeps
    /// the pool's own GPUs at equal times). So the pool borrows a batch GPU only while the user-facing load needs it, and gives
    /// it back first when the load falls.
    fn pool_ranks(&mut self) {
        if !self.ranks_moving.iter().copied().eq(self.moving.iter().map(|(t, (to, _))| (*t, *to))) {
            self.ranks_moving.clear();
            self.ranks_moving.extend(self.moving.iter().map(|(t, (to, _))| (*t, *to)));
            self.ranks_all_stale = true;
        }
        let mut stale = std::mem::take(&mut self.ranks_stale);
        if self.ranks_all_stale {
            stale.clear();
            stale.extend(self.board.gpu_ids());
            self.ranks_all_stale = false;
        }
        for g in stale.drain(..) {
            let r = self.rank_of(g);
            let old = std::mem::replace(&mut self.ranks[g.0 as usize], r);
            self.ranked = self.ranked + usize::from(r > 0) - usize::from(old > 0);
        }
        self.ranks_stale = stale;
        debug_assert!(
            self.board.gpu_ids().all(|g| self.ranks[g.0 as usize] == self.rank_of(g)),
            "a GPU's pool rank drifted"
        );
        debug_assert!(
            self.board.gpu_ids().all(|g| self.contended[g.0 as usize] == self.contended_now(g)),
            "a GPU's contention drifted"
        );
        debug_assert_eq!(self.ranked, self.ranks.iter().filter(|r| **r > 0).count());
    }

    /// `gpu`'s rank for the pool now (see [`NodePolicy::pool_ranks`]).
    fn rank_of(&self, g: GpuId) -> u8 {
        if self.shunned(g) {
            u8::MAX
        } else if self.params.steady_pool && self.contended[g.0 as usize] {
            debug_assert_eq!(
                self.contended[g.0 as usize],
                self.contended_now(g),
                "{g}'s contention drifted"
            );
            1 + self.lead_rank.get(g.0 as usize).copied().unwrap_or(0)
        } else {
            0
        }
    }

    /// Whether `gpu` has been the pool's for a whole interval, or the inference server
    /// uses it: its batch tenants are moved off. A GPU the pool borrows for a moment of
    /// user-facing load is not (it is given back within the interval).
    fn held_from_batch(&self, gpu: GpuId, now: Nanos) -> bool {
        self.serves_models(gpu)
            || self
                .pool_since
                .get(gpu.0 as usize)
                .copied()
                .flatten()
                .is_some_and(|since| now >= since + self.params.interval)
    }

    /// Whether `gpu` is kept from batch homes: Flexy's pool's or the inference
    /// server's.
    fn reserved(&self, gpu: GpuId) -> bool {
        self.pool.contains(gpu) || self.serves_models(gpu)
    }

    /// Pass the server's actions on, holding those for a GPU where the node's own
    /// tasks still run; release the held ones whose GPU is free of them now.
    fn server_actions(&mut self, out: Vec<Action>, actions: &mut Vec<Action>) {
        let Some(inf) = self.inference.as_mut() else { return };
        let busy = |a: &Action, board: &Board| {
            let gpu = match a {
                Action::Dispatch { placement, .. } | Action::DispatchBatch { placement, .. } => {
                    placement.gpu
                }
                Action::Repartition { gpu, .. } => *gpu,
                _ => return false,
            };
            !board.state(gpu).running().is_empty()
        };
        if inf.held.is_empty() && out.is_empty() {
            return;
        }
        let mut waiting = std::mem::take(&mut inf.held);
        waiting.extend(out);
        for a in waiting {
            if let Action::EndTask { task, .. } = &a {
                inf.tasks.remove(task);
            }
            if busy(&a, &self.board) {
                inf.held.push(a);
            } else {
                actions.push(a);
            }
        }
    }

    /// Publish the report to `to` after every sample.
    pub fn with_report(mut self, to: Arc<Mutex<NodeReport>>) -> NodePolicy {
        self.shared = Some(to);
        self
    }

    /// Publish the balancer's part in DCUDA's form (loads, states, migrations) to `to`
    /// after every sample: the daemon's status shows it as it shows DCUDA's.
    pub fn with_balance_report(mut self, to: Arc<Mutex<dcuda::DcudaReport>>) -> NodePolicy {
        self.balance_shared = Some(to);
        self
    }

    /// The report as of the last sample.
    pub fn report(&self) -> &NodeReport {
        &self.report
    }

    /// The board (status displays, tests).
    pub fn board(&self) -> &Board {
        &self.board
    }

    /// Fair queuing's service per batch tenant, ns.
    pub fn service(&self) -> &BTreeMap<TenantId, u64> {
        self.batch.service()
    }

    fn memory_of(&self, tenant: TenantId) -> Bytes {
        self.declared.get(&tenant).copied().unwrap_or(Bytes(0))
    }

    /// Whether `tenant`'s declared memory fits on `gpu` beside the tenants homed there,
    /// those already moving there (counted at both ends until their move is done) and
    /// the user-facing tenants'.
    fn fits(&self, tenant: TenantId, gpu: GpuId) -> bool {
        self.fits_beside(tenant, gpu, 0)
    }

    /// [`Self::fits`] with `extra` bytes more promised to `gpu`.
    fn fits_beside(&self, tenant: TenantId, gpu: GpuId, extra: u64) -> bool {
        if !self.params.memory_homes {
            return true;
        }
        self.committed(gpu) + extra + self.memory_of(tenant).0 <= self.board.gpu_memory(gpu).0
    }

    /// Whether a batch tenant homed on `gpu` contends, asked of each.
    fn contended_now(&self, gpu: GpuId) -> bool {
        self.homed_on[gpu.0 as usize].iter().any(|t| self.contends(*t))
    }

    /// Bring [`NodePolicy::contended`] up to date with the tenants the board logged.
    fn refresh_contended(&mut self) {
        let mut changed = std::mem::take(&mut self.changed);
        self.board.take_changed(&mut changed);
        for t in changed.drain(..) {
            if let Some(g) = self.homes.get(&t).copied() {
                let now = self.contended_now(g);
                if std::mem::replace(&mut self.contended[g.0 as usize], now) != now {
                    self.ranks_stale.push(g);
                }
            }
        }
        self.changed = changed;
    }

    /// Whether a batch tenant contends for its GPU now: it has work queued or running,
    /// or used its GPU in the last interval.
    fn contends(&self, tenant: TenantId) -> bool {
        self.board.queue_of(tenant).0 > 0
            || self.board.tenant_runs(tenant)
            || self.monitor.demand(tenant).is_some_and(|d| d > 0.0)
    }

    /// Whether a tenant may be moved now: not moving already, not arrived by a move
    /// within `min_stay`, not a Slurm job's (pinned to its job's GPUs).
    fn movable(&self, now: Nanos, tenant: TenantId) -> bool {
        !self.moving.contains_key(&tenant)
            && self.arrived.get(&tenant).is_none_or(|at| now >= *at + self.params.min_stay)
            && self.board.tenant_spec(tenant).is_none_or(|s| s.gpus.is_empty())
    }

    /// The share step (not DCUDA's; see [`NodeParams::even_shares`]). Fair queuing
    /// gives each tenant of a GPU its weight's part of that GPU, so a tenant's share is
    /// its weight over the summed weight of the contending tenants homed with it. DCUDA's
    /// step 1 balances *load*: with every tenant backlogged, every GPU is overloaded
    /// and it moves nothing, however unequal those sums are. This step takes the GPU
    /// outside the pool with the largest summed weight and moves the one tenant whose
    /// move lowers the larger of the two GPUs' sums the most, where its memory fits,
    /// while that raises the lowest share per unit of weight by more than
    /// [`SHARES_HYSTERESIS`]; then again, each tenant at most once.
    fn even_shares(&self, now: Nanos) -> Vec<Move> {
        let n = self.board.gpu_count();
        let outside: Vec<bool> = (0..n)
            .map(|g| {
                let gpu = GpuId(g as u32);
                !self.reserved(gpu) && self.board.state(gpu).is_powered()
            })
            .collect();
        let mut plan = Planned::new(self.summed_weights(true));
        let mut candidates: Vec<Vec<(TenantId, f64)>> = vec![Vec::new(); n];
        for (tenant, home) in &self.homes {
            let at = self.moving.get(tenant).map_or(*home, |(to, _)| *to);
            if self.contends(*tenant) && self.movable(now, *tenant) {
                candidates[at.0 as usize].push((*tenant, self.weight_of(*tenant)));
            }
        }
        let room = |t: TenantId, g: usize, promised: &[u64]| {
            let gpu = GpuId(g as u32);
            self.board.may_run_on(t, gpu) && self.fits_beside(t, gpu, promised[g])
        };
        // a contending tenant homed on a reserved GPU (the pool's or the inference
        // server's) receives nothing there: it moves to the GPU outside with the least
        // summed weight where it fits, loaded or not (DCUDA's step 1 moves it only to
        // an underloaded GPU, and with every tenant backlogged there is none)
        for g in (0..n).filter(|g| !outside[*g] && self.held_from_batch(GpuId(*g as u32), now)) {
            for (tenant, w) in std::mem::take(&mut candidates[g]) {
                let to = (0..n)
                    .filter(|h| outside[*h] && room(tenant, *h, &plan.promised))
                    .min_by(|a, b| plan.summed[*a].total_cmp(&plan.summed[*b]).then(a.cmp(b)));
                let Some(to) = to else { continue };
                let bytes = self.memory_of(tenant).0;
                plan.add(
                    Move {
                        tenant,
                        from: GpuId(g as u32),
                        to: GpuId(to as u32),
                        reason: MoveReason::Shares,
                    },
                    w,
                    bytes,
                );
            }
        }
        while let Some(from) = (0..n)
            .filter(|g| outside[*g])
            .max_by(|a, b| plan.summed[*a].total_cmp(&plan.summed[*b]).then(b.cmp(a)))
        {
            let (sums, outside) = (&plan.summed, &outside);
            let best = candidates[from]
                .iter()
                .enumerate()
                .flat_map(|(i, (t, w))| {
                    (0..n)
                        .filter(move |g| outside[*g] && *g != from)
                        .map(move |g| ((sums[from] - w).max(sums[g] + w), i, g, *t))
                })
                .filter(|(_, _, g, t)| room(*t, *g, &plan.promised))
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let Some((larger, i, to, tenant)) = best else { break };
            if larger >= plan.summed[from] * (1.0 - SHARES_HYSTERESIS) {
                break;
            }
            let (_, w) = candidates[from].remove(i);
            let bytes = self.memory_of(tenant).0;
            plan.add(
                Move {
                    tenant,
                    from: GpuId(from as u32),
                    to: GpuId(to as u32),
                    reason: MoveReason::Shares,
                },
                w,
                bytes,
            );
        }
        plan.moves
    }

    /// A batch tenant's weight (at least 1).
    fn weight_of(&self, tenant: TenantId) -> f64 {
        self.board.tenant_spec(tenant).map_or(1.0, |s| f64::from(s.weight.max(1)))
    }

    /// The summed weight of the batch tenants on each GPU (each at the GPU it is moving
    /// to), of the contending ones only if `contending`.
    fn summed_weights(&self, contending: bool) -> Vec<f64> {
        let mut summed = vec![0.0_f64; self.board.gpu_count()];
        for (tenant, home) in &self.homes {
            let at = self.moving.get(tenant).map_or(*home, |(to, _)| *to);
            if !contending || self.contends(*tenant) {
                summed[at.0 as usize] += self.weight_of(*tenant);
            }
        }
        summed
    }

    /// A tenant's demand for the balancer: the monitor's, or a whole GPU for one that
    /// has work and was never measured (held since it arrived).
    fn demand(&self, tenant: TenantId) -> f64 {
        self.monitor
            .demand(tenant)
            .unwrap_or_else(|| if self.board.queue_of(tenant).0 > 0 { 1.0 } else { 0.0 })
    }

    /// Batch tenants per GPU with their demand, each at the GPU it is moving to.
    fn loads(&self) -> Loads {
        let mut loads: Loads = vec![Vec::new(); self.board.gpu_count()];
        for (tenant, gpu) in &self.homes {
            let at = self.moving.get(tenant).map_or(*gpu, |(to, _)| *to);
            loads[at.0 as usize].push((*tenant, self.demand(*tenant)));
        }
        loads
    }

    /// Home `tenant` on the least-loaded GPU outside the pool with room for its memory
    /// (its job's GPUs only, for a Slurm job's); false if there is none.
    fn place(&mut self, tenant: TenantId) -> bool {
        let loads = self.loads();
        let allowed: Vec<GpuId> =
            self.board.tenant_spec(tenant).map_or(Vec::new(), |s| s.gpus.clone());
        let pick = self
            .board
            .gpu_ids()
            .filter(|g| allowed.is_empty() || allowed.contains(g))
            .filter(|g| self.board.state(*g).is_powered() && self.fits(tenant, *g))
            // outside the pool if possible; a pinned tenant takes its GPU regardless
            .min_by(|a, b| {
                let (la, lb) = (&loads[a.0 as usize], &loads[b.0 as usize]);
                self.reserved(*a)
                    .cmp(&self.reserved(*b))
                    .then(dcuda::utilization(la).total_cmp(&dcuda::utilization(lb)))
                    .then(la.len().cmp(&lb.len()))
                    .then(a.cmp(b))
            });
        let Some(gpu) = pick else { return false };
        self.home_on(tenant, gpu);
        true
    }

    fn home_on(&mut self, tenant: TenantId, gpu: GpuId) {
        self.batch.set_home(&self.board, tenant, Some(gpu));
        self.homes.insert(tenant, gpu);
        self.homed_memory[gpu.0 as usize].0 += self.memory_of(tenant).0;
        self.homed_on[gpu.0 as usize].insert(tenant);
        self.contended[gpu.0 as usize] = self.contended_now(gpu);
        self.ranks_stale.push(gpu);
    }

    fn unhome(&mut self, tenant: TenantId) {
        self.batch.set_home(&self.board, tenant, None);
        if let Some(gpu) = self.homes.remove(&tenant) {
            let m = self.memory_of(tenant);
            self.homed_memory[gpu.0 as usize].0 -= m.0.min(self.homed_memory[gpu.0 as usize].0);
            self.homed_on[gpu.0 as usize].remove(&tenant);
            self.contended[gpu.0 as usize] = self.contended_now(gpu);
            self.ranks_stale.push(gpu);
        }
    }

    /// Declared memory that `gpu` holds or is promised: the batch tenants homed there,
    /// those moving there (counted at both ends until their move is done), and the
    /// user-facing tenants' (kept free everywhere).
    fn committed(&self, gpu: GpuId) -> u64 {
        let services = self.services_memory;
        let incoming: u64 = self
            .moving
            .iter()
            .filter(|(t, (to, _))| *to == gpu && self.homes.get(*t) != Some(&gpu))
            .map(|(t, _)| self.memory_of(*t).0)
            .sum();
        self.homed_memory[gpu.0 as usize].0 + incoming + services
    }

    /// Whether `gpu`'s homed batch tenants leave no room for the user-facing tenants'
    /// memory: a service that registered after they were homed would run out of
    /// memory there.
    fn overcommitted(&self, gpu: GpuId) -> bool {
        self.params.memory_homes
            && !self.services.is_empty()
            && self.committed(gpu) > self.board.gpu_memory(gpu).0
    }

    /// Free memory (not DCUDA's; see [`NodeParams::make_room`]), for one need at a
    /// time:
    /// - a GPU over-committed since a service registered: its batch tenants move off
    ///   until the services' memory fits there again;
    /// - else the first tenant waiting unplaced: homes admitted one by one, each on the
    ///   least-loaded GPU, spread small tenants over every GPU, so that a large one
    ///   arriving later may fit on none though the node has room for it in all. The GPU
    ///   where that takes the fewest bytes moved is freed for it.
    ///
    /// Nothing when no GPU can be freed.
    fn make_room(&self, now: Nanos) -> Vec<Move> {
        for gpu in self.board.gpu_ids() {
            if self.overcommitted(gpu) {
                let deficit = self.committed(gpu) - self.board.gpu_memory(gpu).0;
                if let Some((_, moves)) = self.free_on(now, gpu, deficit) {
                    return moves;
                }
            }
        }
        let Some(&waiting) = self.unplaced.first() else { return Vec::new() };
        let need = self.memory_of(waiting).0;
        let mut best: Option<(u64, Vec<Move>)> = None;
        for gpu in self.board.gpu_ids() {
            if !self.board.may_run_on(waiting, gpu) || !self.board.state(gpu).is_powered() {
                continue;
            }
            let deficit = (self.committed(gpu) + need).saturating_sub(self.board.gpu_memory(gpu).0);
            if deficit == 0 {
                continue; // it fits already: the next placement takes it
            }
            if let Some((freed, moves)) = self.free_on(now, gpu, deficit)
                && best.as_ref().is_none_or(|(b, _)| freed < *b)
            {
                best = Some((freed, moves));
            }
        }
        best.map(|(_, moves)| moves).unwrap_or_default()
    }

    /// Moves that free at least `deficit` bytes of declared memory on `gpu`: its
    /// movable tenants, largest first, each to where it fits (the GPU with the least
    /// summed weight); with the bytes freed, or `None` if they cannot free enough.
    fn free_on(&self, now: Nanos, gpu: GpuId, deficit: u64) -> Option<(u64, Vec<Move>)> {
        let n = self.board.gpu_count();
        let mut plan = Planned::new(self.summed_weights(false));
        let mut here: Vec<(u64, TenantId)> = self
            .homes
            .iter()
            .filter(|(t, h)| **h == gpu && self.movable(now, **t))
            .map(|(t, _)| (self.memory_of(*t).0, *t))
            .collect();
        here.sort_by(|a, b| b.cmp(a));
        let mut freed = 0_u64;
        for (bytes, tenant) in here {
            if freed >= deficit {
                break;
            }
            let to = (0..n)
                .filter(|h| *h != gpu.0 as usize)
                .filter(|h| {
                    let target = GpuId(*h as u32);
                    self.board.may_run_on(tenant, target)
                        && !self.overcommitted(target)
                        && self.fits_beside(tenant, target, plan.promised[*h])
                })
                .min_by(|a, b| plan.summed[*a].total_cmp(&plan.summed[*b]).then(a.cmp(b)));
            let Some(to) = to else { continue };
            freed += bytes;
            let m = Move { tenant, from: gpu, to: GpuId(to as u32), reason: MoveReason::Room };
            plan.add(m, self.weight_of(tenant), bytes);
        }
        (freed >= deficit).then_some((freed, plan.moves))
    }

    /// The GPUs with contending batch tenants ranked for the pool: the one whose
    /// tenants are furthest ahead of their fair share (the largest least start tag)
    /// first, so that the tenants that fell behind are not the ones the pool stops
    /// (a GPU's place is its rank; a sample's ranks hold until the next, so the pool
    /// moves at most once per interval for this).
    fn rank_leads(&mut self) {
        let n = self.board.gpu_count();
        let mut least: Vec<(std::cmp::Reverse<u128>, usize)> = (0..n)
            .map(|g| {
                let min = self.homed_on[g]
                    .iter()
                    .filter(|t| self.contends(**t))
                    .filter_map(|t| self.batch.tags(*t).map(|x| x.start))
                    .min()
                    .unwrap_or(u128::MAX);
                (std::cmp::Reverse(min), g)
            })
            .collect();
        least.sort_unstable();
        for (i, (_, g)) in least.into_iter().enumerate() {
            self.lead_rank[g] = i.min(200) as u8;
        }
    }

    /// The monitor's sample and DCUDA's steps 1 and 2 over the GPUs outside the pool;
    /// tenants homed inside the pool move out when a GPU has room for them.
    fn sample(&mut self, now: Nanos) {
        if self.params.steady_pool && self.params.fair_pool {
            self.rank_leads();
        }
        self.monitor.sample(now);
        // the monitor's demands changed: every GPU's contention again
        for g in 0..self.contended.len() {
            self.contended[g] = self.contended_now(GpuId(g as u32));
        }
        self.ranks_all_stale = true;
        let loads = self.loads();
        if self.params.migrate {
            self.decide_moves(now, &loads);
        }
        self.publish(&loads);
    }

    /// DCUDA's steps, the share step and the room step: the moves this sample decides.
    fn decide_moves(&mut self, now: Nanos, loads: &Loads) {
        let n = loads.len();
        // a tenant that may not move now (moving already, arrived lately, a Slurm job's)
        // is counted above any GPU's room, so that its load keeps its GPU's state and
        // no step picks it; the pool's GPUs likewise hold a stand-in no target can
        // take, so that the balancer moves their tenants out and nothing in
        const POOL: TenantId = TenantId(u64::MAX);
        let unreachable = self.params.thresh_over + 1.0;
        let movable = |t: &TenantId| self.movable(now, *t);
        let mut candidates: Loads = loads
            .iter()
            .enumerate()
            .map(|(g, apps)| {
                let mut l: Vec<(TenantId, f64)> = apps
                    .iter()
                    .map(|(t, d)| (*t, if movable(t) { *d } else { *d + unreachable }))
                    .collect();
                if self.held_from_batch(GpuId(g as u32), now) {
                    l.push((POOL, unreachable));
                }
                l
            })
            .collect();
        let mut moves =
            dcuda::balance(&mut candidates, self.params.thresh_over, self.params.thresh_under);
        if !self.params.balance {
            // the ablation keeps the one duty the composition cannot do without: moving
            // tenants off the pool's GPUs (else a tenant homed where the pool stays
            // would wait for ever)
            moves.retain(|m| self.held_from_batch(m.from, now));
        }
        if self.params.balance && self.params.energy {
            // step 2 among the GPUs outside the pool only
            let mut outside: Loads = (0..n)
                .map(|g| {
                    if self.reserved(GpuId(g as u32)) { Vec::new() } else { candidates[g].clone() }
                })
                .collect();
            moves.extend(dcuda::compact(&mut outside, self.params.thresh_under));
        }
        let stays: Vec<bool> =
            moves.iter().map(|m| m.tenant == POOL || !movable(&m.tenant)).collect();
        for (m, stays) in moves.into_iter().zip(stays) {
            if !stays {
                self.decide(now, m);
            }
        }
        if self.params.even_shares {
            for m in self.even_shares(now) {
                self.decide(now, m);
            }
        }
        // one tenant's room at a time, and none while earlier room moves are under way
        let making_room = self.moving.values().any(|(_, r)| *r == MoveReason::Room);
        if self.params.make_room && !making_room {
            for m in self.make_room(now) {
                self.decide(now, m);
            }
        }
    }

    /// The report as of this sample, to whoever reads it.
    fn publish(&mut self, loads: &Loads) {
        self.report.load = loads.iter().map(|l| dcuda::utilization(l)).collect();
        self.report.homed = loads.iter().map(Vec::len).collect();
        self.report.pool = self.pool.gpus().to_vec();
        self.report.unplaced = self.unplaced.len();
        self.samples += 1;
        if let Some(Ok(mut r)) = self.shared.as_ref().map(|s| s.lock()) {
            r.clone_from(&self.report);
        }
        if let Some(Ok(mut r)) = self.balance_shared.as_ref().map(|s| s.lock()) {
            let (over, under) = (self.params.thresh_over, self.params.thresh_under);
            r.utilization = self.report.load.clone();
            r.states =
                self.report.load.iter().map(|u| Some(dcuda::classify(*u, over, under))).collect();
            r.samples = self.samples;
            r.migrations = self.report.migrations;
            r.recent = self.report.recent.clone();
        }
    }

    /// Record a move if it stands: the target is the tenant's to use and has room for
    /// its memory.
    fn decide(&mut self, now: Nanos, m: Move) {
        let Some(home) = self.homes.get(&m.tenant).copied() else { return };
        if home == m.to || !self.board.may_run_on(m.tenant, m.to) || !self.fits(m.tenant, m.to) {
            return;
        }
        self.moving.insert(m.tenant, (m.to, m.reason));
        self.report.migrations += 1;
        dcuda::record_move(&mut self.report.recent, now, Move { from: home, ..m });
    }

    fn dispatch(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        let mut idle = self.board.idle_gpus();
        // the inference server's GPUs are its own
        idle.retain(|g| !self.serves_models(*g));
        let (pool, mut rest): (Vec<GpuId>, Vec<GpuId>) =
            idle.into_iter().partition(|g| self.pool.contains(*g));
        for gpu in pool {
            match self.oldest_service_for(gpu) {
                Some(tenant) => self.serve(now, gpu, tenant, actions),
                // a pool GPU whose batch tenants leave room for no waiting request's
                // context runs their work meanwhile, rather than idle (issue 56: day 139
                // of the trace, where such a GPU sat idle in the pool for 70 s while
                // the services' queue grew without bound and its tenants starved)
                None if self.overcommitted(gpu) && self.board.queued(Classes::UserFacing) > 0 => {
                    let at = rest.partition_point(|g| *g < gpu);
                    rest.insert(at, gpu);
                }
                None => {}
            }
        }
        if self.params.overflow {
            self.overflow(now, &mut rest, actions);
        }
        let homes = &self.homes;
        let moving = &self.moving;
        // a migrating tenant is among those moving until its move is done
        let may_run = |t: TenantId, g: GpuId| homes.get(&t) == Some(&g) && !moving.contains_key(&t);
        let before = actions.len();
        self.batch.dispatch(&mut self.board, now, &rest, &may_run, actions);
        for a in &actions[before..] {
            if let Action::Dispatch { task, placement } = a
                && let Some(r) = self.board.running_task(placement.gpu, *task)
            {
                self.monitor.started_exclusive(*task, r.spec.tenant, now);
            }
        }
    }

    /// The registered services changed: their memory, kept free on every GPU, and
    /// Flexy's minimum reservation. The reservation keeps GPUs ready for user-facing
    /// requests; with no service registered it would keep them idle for none, so with
    /// [`NodeParams::reserve_only_with_services`] batch tenants get them until one
    /// registers (the pool then takes one back at once).
    fn services_changed(&mut self) {
        self.services_memory = self.services.values().map(|m| m.0).sum();
        self.ranks_all_stale = true;
        if self.params.reserve_only_with_services {
            let k = if self.services.is_empty() { 0 } else { self.params.flexy.reserve };
            self.pool.set_reserve(k);
        }
    }

    /// A user-facing request still queued when only two task times are left before its
    /// SLA would miss it waiting for the pool: it takes an idle GPU outside the pool
    /// where the services' memory fits, before batch work (batch GPUs free at every
    /// task's end, so one is never far).
    fn overflow(&mut self, now: Nanos, idle: &mut Vec<GpuId>, actions: &mut Vec<Action>) {
        let le = self.pool.estimate();
        // a request that would be late by the time the next GPU outside the pool frees
        // cannot wait for it: with batch tasks as long as the SLA, waiting for a late
        // request's last moment left it behind a fresh batch task (issue 56: 92.5% of
        // requests in time where priority keeps 100%). Looked up only when a request
        // waits beside an idle GPU (a walk of the node), which is first asked before any
        // idle GPU is taken below
        let mut next_free: Option<Nanos> = None;
        while !idle.is_empty() {
            let Some(tenant) = self.board.oldest_head(Classes::UserFacing) else { return };
            let (Some(spec), (_, Some(since))) =
                (self.board.tenant_spec(tenant), self.board.queue_of(tenant))
            else {
                return;
            };
            let ServiceClass::UserFacing { sla } = spec.class else { return };
            let latest_start = since + sla.saturating_sub(le + le);
            let wait = *next_free.get_or_insert_with(|| {
                self.board
                    .gpu_ids()
                    .filter(|g| {
                        !self.pool.contains(*g) && !idle.contains(g) && !self.serves_models(*g)
                    })
                    .map(|g| self.board.expected_free_at(g, now))
                    .min()
                    .map_or(Nanos::ZERO, |at| at.saturating_sub(now))
            });
            if now + wait < latest_start {
                return;
            }
            // only where its context fits beside the batch tenants homed there
            let Some(i) = idle.iter().position(|g| self.service_fits(*g, tenant)) else {
                return;
            };
            let gpu = idle.remove(i);
            self.serve(now, gpu, tenant, actions);
        }
    }

    /// Whether user-facing `tenant`'s context fits on `gpu`: it lives there already,
    /// or it fits beside the batch tenants homed (or moving) there and the services
    /// that live there. Where the homes leave room for every service (the rule for
    /// homing), every service fits.
    fn service_fits(&self, gpu: GpuId, tenant: TenantId) -> bool {
        if !self.overcommitted(gpu) {
            return true;
        }
        let on = &self.service_on[gpu.0 as usize];
        if on.contains(&tenant) {
            return true;
        }
        let batch = self.committed(gpu) - self.services_memory;
        let living: u64 = on.iter().map(|t| self.services.get(t).map_or(0, |b| b.0)).sum();
        let own = self.services.get(&tenant).map_or(0, |b| b.0);
        batch + living + own <= self.board.gpu_memory(gpu).0
    }

    /// The user-facing tenant whose request `gpu` serves next: the oldest head, or on a
    /// GPU whose homes leave no room for every service, the oldest among those whose
    /// context fits there (a walk of the waiting tenants, on that rare GPU only).
    fn oldest_service_for(&self, gpu: GpuId) -> Option<TenantId> {
        if !self.overcommitted(gpu) {
            return self.board.oldest_head(Classes::UserFacing);
        }
        self.board.oldest_head_where(Classes::UserFacing, |t| self.service_fits(gpu, t))
    }

    /// Dispatch user-facing `tenant`'s head to `gpu`, where its context lives from now.
    fn serve(&mut self, now: Nanos, gpu: GpuId, tenant: TenantId, actions: &mut Vec<Action>) {
        if self.board.dispatch(now, gpu, tenant, actions).is_some() {
            let on = &mut self.service_on[gpu.0 as usize];
            if !on.contains(&tenant) {
                on.push(tenant);
            }
        }
    }

    /// Time a batch tenant waits with work queued is held (its turn, a move), not idle:
    /// `tenants`' holds follow their state now (a tenant's state changes only with an
    /// event of its own or a dispatch; every sample looks at every tenant).
    fn hold_waiting(&mut self, now: Nanos, tenants: Vec<TenantId>) {
        for tenant in tenants {
            if !self.homes.contains_key(&tenant) {
                continue;
            }
            // the board's running count, not a walk of the node (`tenant_gpus`): a
            // third of the policy's time at 100x its node (issue 55)
            let waiting = self.board.queue_of(tenant).0 > 0 && !self.board.tenant_runs(tenant);
            if waiting {
                self.monitor.hold(tenant, now);
            } else {
                self.monitor.release(tenant, now);
            }
        }
    }
}

impl Policy for NodePolicy {
    fn label(&self) -> String {
        "Node".into()
    }

    fn tick_interval(&self) -> Option<Nanos> {
        let spin = self.params.spin;
        let own =
            if spin > Nanos::ZERO { spin.min(self.params.interval) } else { self.params.interval };
        let server = self.inference.as_ref().and_then(|i| i.server.tick_interval());
        Some(server.map_or(own, |s| s.min(own)))
    }

    fn min_reservation(&self) -> usize {
        self.pool.params().reserve
    }

    fn home(&self, tenant: TenantId) -> Option<GpuId> {
        self.homes.get(&tenant).copied()
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        let route = self.inference.as_mut().map_or(Route::Node, |i| i.route(event));
        if route != Route::Node {
            let mut out = Vec::new();
            if let Some(inf) = self.inference.as_mut() {
                inf.server.on_event(now, event, &mut out);
                // only the server's own events change the GPUs it uses
                let in_use = inf.server.gpus_in_use();
                if in_use != inf.in_use {
                    inf.in_use = in_use;
                    self.ranks_all_stale = true;
                }
            }
            self.server_actions(out, actions);
            if route == Route::Server {
                return;
            }
        }
        self.node_event(now, event, actions);
        // the node's tasks may have left a GPU the server waits for
        self.server_actions(Vec::new(), actions);
    }
}

impl NodePolicy {
    /// An event of the node's own tenants (or a tick).
    fn node_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        let first_action = actions.len();
        let finished = self.board.finishing(event);
        // the tenants whose waiting may change with this event
        let mut touched: Vec<TenantId> = finished.map(|(t, _)| t).into_iter().collect();
        match event {
            Event::TaskSubmitted(t) => touched.push(t.tenant),
            Event::TenantRegistered(spec) => touched.push(spec.id),
            Event::MigrationDone { tenant, .. } | Event::MigrationFailed { tenant, .. } => {
                touched.push(*tenant)
            }
            _ => {}
        }
        if let Some(done) = self.board.observe(now, event, actions)
            && done.completed
            && done.class.is_user_facing()
        {
            self.pool.learn(done.ran_for);
        }
        // the services first: Algorithm 1 below sizes the pool for them
        match event {
            Event::TenantRegistered(spec) if spec.class.is_user_facing() => {
                self.services.insert(spec.id, spec.memory);
                self.services_changed();
            }
            Event::TenantLeft { tenant } if self.services.remove(tenant).is_some() => {
                for on in &mut self.service_on {
                    on.retain(|t| t != tenant);
                }
                self.services_changed();
            }
            _ => {}
        }
        // Algorithm 1 first, so that a tenant registering now is homed outside the
        // pool as it now stands
        // (all ranks equal: Flexy's own order, by its indices instead of a sort)
        self.refresh_contended();
        self.pool_ranks();
        if self.ranked > 0 {
            let rank = &self.ranks;
            self.pool.repartition_ranked(&mut self.board, now, actions, &|g| rank[g.0 as usize]);
        } else {
            self.pool.repartition(&mut self.board, now, actions);
        }
        // only when the pool's GPUs changed (a walk of the node on every event, before)
        if self.pool.generation() != self.pool_seen {
            self.pool_seen = self.pool.generation();
            for (g, since) in self.pool_since.iter_mut().enumerate() {
                if !self.pool.contains(GpuId(g as u32)) {
                    *since = None;
                } else if since.is_none() {
                    *since = Some(now);
                }
            }
        }
        match event {
            Event::TenantRegistered(spec) if spec.class.is_user_facing() => {}
            Event::TenantRegistered(spec) => {
                self.declared.insert(spec.id, spec.memory);
                if !self.place(spec.id) {
                    self.unplaced.push(spec.id);
                }
            }
            Event::TenantLeft { tenant } => {
                self.unhome(*tenant);
                self.declared.remove(tenant);
                self.unplaced.retain(|t| t != tenant);
                self.moving.remove(tenant);
                self.arrived.remove(tenant);
                self.monitor.forget(*tenant);
            }
            Event::TaskFinished { task, .. } => self.monitor.stopped(*task, now),
            // a tenant that left while its move was under way has no memory anywhere:
            // homing it again would keep a ghost on the target (the held-out window at
            // day 142: such ghosts let the node over-commit a GPU, 7 tenants lost)
            Event::MigrationDone { tenant, .. } if !self.declared.contains_key(tenant) => {
                self.moving.remove(tenant);
            }
            Event::MigrationDone { tenant, to } => {
                self.unhome(*tenant);
                self.home_on(*tenant, *to);
                self.moving.remove(tenant);
                self.arrived.insert(*tenant, now);
            }
            Event::MigrationFailed { tenant, .. } => {
                self.moving.remove(tenant);
            }
            Event::ActionRefused { action, .. } => {
                if let Action::Migrate { tenant, .. } = action.as_ref() {
                    self.moving.remove(tenant);
                }
            }
            _ => {}
        }
        // fair queuing hears of batch tenants only
        let batch_event = !matches!(event, Event::TenantRegistered(s) if s.class.is_user_facing());
        let finished = finished.filter(|(t, _)| self.batch.knows(*t));
        if batch_event {
            self.batch.observe(&self.board, now, event, finished);
        }
        // those waiting for memory, in arrival order, once some may have freed
        if matches!(event, Event::TenantLeft { .. } | Event::MigrationDone { .. }) {
            let waiting = std::mem::take(&mut self.unplaced);
            for tenant in waiting {
                if !self.place(tenant) {
                    self.unplaced.push(tenant);
                }
            }
        }
        if now >= self.next_sample {
            self.sample(now);
            while self.next_sample <= now {
                self.next_sample += self.params.interval;
            }
            touched = self.homes.keys().copied().collect();
        }
        // a move decided before the inference server took its target (it waits for the
        // tenant's task to end) is dropped: the server partitions that GPU, and a
        // migration there would break its layout (the engine refuses it)
        if self.inference.is_some() {
            let taken: Vec<TenantId> = self
                .moving
                .iter()
                .filter(|(t, (to, _))| self.serves_models(*to) && !self.board.is_migrating(**t))
                .map(|(t, _)| *t)
                .collect();
            for tenant in taken {
                self.moving.remove(&tenant);
            }
        }
        dcuda::start_moves(&mut self.board, &self.homes, &mut self.moving, actions);
        self.dispatch(now, actions);
        for a in &actions[first_action..] {
            if let Action::Dispatch { task, placement } = a
                && let Some(r) = self.board.running_task(placement.gpu, *task)
            {
                touched.push(r.spec.tenant);
            }
        }
        self.hold_waiting(now, touched);
        self.pool.reset_if_needed(&mut self.board, now, actions);
    }
}
