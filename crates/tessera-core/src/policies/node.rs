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

mod balance;
mod dispatch;
mod homes;
mod inference;
mod params;

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
use crate::tenant_map::TenantMap;
use crate::units::{Bytes, Nanos};
use crate::vec_map::VecMap;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use homes::SharesScratch;
pub use inference::IsModel;
use inference::{Inference, Route};
pub use params::{NodeParams, NodeReport};

/// The share step moves a tenant only when that raises the lowest share per unit of
/// weight by more than this fraction: a move pauses the tenant, so a small gain is not
/// worth it, and it keeps two near-equal GPUs from trading a tenant back and forth.
const SHARES_HYSTERESIS: f64 = 0.1;

/// The composed node policy (see the module documentation).
#[derive(Debug)]
pub struct NodePolicy {
    board: Board,
    params: NodeParams,
    pool: ElasticPool,
    batch: FairQueue,
    monitor: Monitor,
    /// Each placed batch tenant's home GPU.
    homes: TenantMap<GpuId>,
    /// Declared memory of the tenants homed on each GPU, and of each batch tenant (kept
    /// here: the board forgets a tenant before the policy hears that it left).
    homed_memory: Vec<Bytes>,
    declared: TenantMap<Bytes>,
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
    homed_on: Vec<VecMap<TenantId, ()>>,
    /// Batch tenants waiting for a GPU with room for their memory, in arrival order.
    unplaced: Vec<TenantId>,
    /// Moves decided, waiting for the tenant to be between tasks.
    moving: BTreeMap<TenantId, (GpuId, MoveReason)>,
    /// Whether a decided move may start at this event: set when a move is decided, when
    /// the board logs a change of a moving tenant (its task ended, a reset killed it),
    /// when a migration ends, and at every refused action and cancellation (rare; a
    /// walk more starts nothing it should not). A move kept by the last start waits
    /// for its tenant's task or migration to end, which only these change: a walk of
    /// every decided move on every event was a thirtieth of the node policy at 100x
    /// its node (issue 55). (Checked in debug builds whenever the walk is skipped.)
    moves_may_start: bool,
    /// When each tenant last arrived somewhere by a migration.
    arrived: TenantMap<Nanos>,
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
    /// A rank moved after the pool was last chosen (by an event's own dispatches): the
    /// next event, a tick included, chooses the pool again with it.
    ranks_pending: bool,
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
    /// Scratch: the tenants whose waiting an event may change, and an event's idle
    /// GPUs in and out of the pool (kept, not made per event: issue 55).
    touched: Vec<TenantId>,
    /// Tenants homed since the last sample by another tenant's event (the memory
    /// waiting for a departure or a move): their holds are set at the next sample, as
    /// when every sample walked every home. Every other home's hold is true to its
    /// state at the end of each event (checked in debug builds): the walk of every home
    /// at each sample changed nothing else, at a hundred-odd instructions per home
    /// (issue 55).
    placed_since_sample: Vec<TenantId>,
    idle_pool: Vec<GpuId>,
    idle_rest: Vec<GpuId>,
    /// Scratch: a sample's loads and the balancer's candidates, per GPU (lists made
    /// per sample were most of a sample's cost, issue 55; emptied after use).
    loads_scratch: Loads,
    candidates_scratch: Loads,
    /// Scratch: the share step's lists per GPU (outside the pool, summed weights,
    /// promised memory), refilled in place at each sample (issue 55).
    shares_scratch: SharesScratch,
    /// Scratch: the energy step's lists of the GPUs outside the pool, and the ranking
    /// of the GPUs' leads ([`NodePolicy::rank_leads`]).
    outside_scratch: Loads,
    least_scratch: Vec<(std::cmp::Reverse<u128>, usize)>,
}

impl NodePolicy {
    /// The node policy over `gpus`.
    pub fn new(gpus: &[GpuSpec], params: NodeParams) -> NodePolicy {
        let mut node = NodePolicy {
            // (user-facing heads only: the node asks for no batch tenant's oldest head)
            board: Board::new(gpus)
                .with_head_index_of(Classes::UserFacing)
                .with_free_order()
                .with_change_log(),
            params,
            pool: ElasticPool::new(gpus.len(), params.flexy),
            batch: FairQueue::new(params.spin),
            monitor: Monitor::default(),
            homes: TenantMap::default(),
            homed_memory: vec![Bytes(0); gpus.len()],
            declared: TenantMap::default(),
            services: BTreeMap::new(),
            services_memory: 0,
            service_on: vec![Vec::new(); gpus.len()],
            homed_on: vec![VecMap::default(); gpus.len()],
            unplaced: Vec::new(),
            moving: BTreeMap::new(),
            moves_may_start: false,
            arrived: TenantMap::default(),
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
            ranks_pending: false,
            ranks_moving: Vec::new(),
            contended: vec![false; gpus.len()],
            changed: Vec::new(),
            touched: Vec::new(),
            placed_since_sample: Vec::new(),
            idle_pool: Vec::new(),
            idle_rest: Vec::new(),
            loads_scratch: Vec::new(),
            candidates_scratch: Vec::new(),
            shares_scratch: SharesScratch::default(),
            outside_scratch: Vec::new(),
            least_scratch: Vec::new(),
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
    ///
    /// Returns whether a rank moved.
    fn pool_ranks(&mut self) -> bool {
        // (most events: no move under way, and a walk of two empty lists still cost
        // a tree's iterator, twice per event)
        let unmoved = self.moving.is_empty() && self.ranks_moving.is_empty();
        // most events: no move under way and no GPU's rank to look at again (the walk's
        // setup below, the list taken out and put back, was a third of the 65
        // instructions that answer cost, four times per task, issue 55)
        if unmoved && !self.ranks_all_stale && self.ranks_stale.is_empty() {
            self.check_ranks();
            return false;
        }
        if !unmoved
            && !self
                .ranks_moving
                .iter()
                .copied()
                .eq(self.moving.iter().map(|(t, (to, _))| (*t, *to)))
        {
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
        let mut moved = false;
        for g in stale.drain(..) {
            let r = self.rank_of(g);
            let old = std::mem::replace(&mut self.ranks[g.0 as usize], r);
            self.ranked = self.ranked + usize::from(r > 0) - usize::from(old > 0);
            moved |= r != old;
        }
        self.ranks_stale = stale;
        self.check_ranks();
        moved
    }

    /// Debug builds: every GPU's pool rank and contention are as a recomputation says.
    fn check_ranks(&self) {
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
    pub fn service(&self) -> BTreeMap<TenantId, u64> {
        self.batch.service()
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

    /// A tick only passes time: it finds nothing new and moves no one but by what
    /// falls due by the clock (issue 55: ticks every 2 ms were six in seven of the
    /// policy's events on the bench's node). Those moments: the next sample (the
    /// monitor, the balancer, the share and room steps), and fair queuing's spin
    /// budgets running out. Nothing is promised while the pool's choice could change
    /// (a GPU of it busy or passed over, or its size not Algorithm 1's), or would see
    /// ranks that moved since it was made; while a user-facing request waits (the
    /// overflow and F-Reset look at its deadline and at when GPUs free); or beside the
    /// inference server (whose ticks are its own). `tests/node_ticks.rs` holds every
    /// tick before it to changing nothing.
    fn quiet_until(&self) -> Nanos {
        if self.inference.is_some()
            || self.ranks_pending
            || self.board.queued(Classes::UserFacing) > 0
        {
            return Nanos::ZERO;
        }
        let rank = &self.ranks;
        let anew = if self.ranked > 0 {
            self.pool.may_choose_anew(&self.board, &|g| rank[g.0 as usize] > 0)
        } else {
            self.pool.may_choose_anew(&self.board, &|_| false)
        };
        if anew {
            return Nanos::ZERO;
        }
        self.next_sample.min(self.batch.quiet_until())
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
        // (before, a repeat homed the tenant a second time, and the GPU of its first
        // home kept its memory for good)
        if self.board.is_repeated_registration(event) {
            return;
        }
        let first_action = actions.len();
        let finished = self.board.finishing(event);
        // the tenants whose waiting may change with this event
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        touched.extend(finished.map(|(t, _)| t));
        match event {
            Event::TaskSubmitted(t) => touched.push(t.tenant),
            Event::TenantRegistered(spec) => touched.push(spec.id),
            Event::MigrationDone { tenant, .. } | Event::MigrationFailed { tenant, .. } => {
                touched.push(*tenant);
                self.moves_may_start = true;
            }
            // rare events that change a queue or a running count without naming its
            // tenant (a cancelled task, a refused dispatch): every home
            Event::TaskCancelRequested { .. } | Event::ActionRefused { .. } => {
                touched.extend(self.homes.keys().copied());
                // (a refused migration: its tenant may move again)
                self.moves_may_start = true;
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
        self.ranks_pending = false;
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
            // (the monitor runs only what the board runs: its tenant is the board's)
            Event::TaskFinished { task, .. } => {
                if let Some((tenant, _)) = finished {
                    self.monitor.stopped_of(*task, tenant, now);
                }
            }
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
            Event::ActionRefused { action, .. } => match action.as_ref() {
                Action::Migrate { tenant, .. } => {
                    self.moving.remove(tenant);
                }
                Action::Dispatch { task, .. } => self.monitor.cancelled(*task),
                _ => {}
            },
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
                if self.place(tenant) {
                    self.placed_since_sample.push(tenant);
                } else {
                    self.unplaced.push(tenant);
                }
            }
        }
        if now >= self.next_sample {
            self.sample(now);
            while self.next_sample <= now {
                self.next_sample += self.params.interval;
            }
            touched.append(&mut self.placed_since_sample);
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
        let homes = &self.homes;
        if std::mem::take(&mut self.moves_may_start) {
            dcuda::start_moves(
                &mut self.board,
                |t| homes.get(&t).copied(),
                &mut self.moving,
                actions,
            );
        } else {
            debug_assert!(
                self.moving.keys().all(|t| homes.contains_key(t)
                    && (self.board.is_migrating(*t) || self.board.tenant_runs(*t))),
                "a decided move could start, and no event said so"
            );
        }
        self.dispatch(now, actions);
        self.dispatched_tenants(&actions[first_action..], &mut touched);
        self.hold_waiting(now, &touched);
        touched.clear();
        self.touched = touched;
        let before_resets = actions.len();
        if self.pool.params().reset.is_some() && self.board.queued(Classes::UserFacing) > 0 {
            // a pool GPU whose batch homes leave room for no waiting service's context
            // runs their work meanwhile (the dispatch): a reset would free it for no
            // request, and kill that work again at every reset's end
            let unable: Vec<GpuId> = (self.pool.gpus().iter().copied())
                .filter(|g| self.overcommitted(*g) && self.oldest_service_for(*g).is_none())
                .collect();
            self.pool.reset_if_needed(&mut self.board, now, actions, &|g| !unable.contains(&g));
        }
        if actions.len() > before_resets {
            self.after_resets(now, before_resets, actions);
        }
        // what this event's dispatches changed, brought into the contention and the
        // pool's ranks now rather than by the next event (the same values: nothing
        // changes in between), so that `quiet_until` knows whether a tick would choose
        // the pool again with ranks that moved
        self.refresh_contended();
        self.ranks_pending = self.pool_ranks();
        debug_assert!(
            self.monitor
                .running_tasks()
                .all(|t| self.board.gpu_ids().any(|g| self.board.running_task(g, t).is_some())),
            "the monitor counts a task the board does not run"
        );
        #[cfg(debug_assertions)]
        self.check_holds();
    }

    /// Every home's hold is true to its state now (but those placed since the last
    /// sample: [`NodePolicy::placed_since_sample`]).
    #[cfg(debug_assertions)]
    fn check_holds(&self) {
        for &tenant in self.homes.keys() {
            if self.placed_since_sample.contains(&tenant) {
                continue;
            }
            assert_eq!(
                self.monitor.is_held(tenant),
                self.waits(tenant),
                "{tenant}'s hold drifted from its state (queued {}, runs {})",
                self.board.queue_len(tenant),
                self.board.tenant_runs(tenant)
            );
        }
    }
}
