//! Bookkeeping shared by the time-sharing policies: what each GPU is doing, the
//! per-tenant FIFO queues, per-kernel duration estimates, and a simple memory book.
//!
//! A policy owns one [`Board`], feeds it every event with [`Board::observe`], then
//! makes its decisions with the helpers here ([`Board::dispatch`], [`Board::reset`],
//! [`Board::oldest_head`], ...). Keeping this out of the policies means a policy
//! module holds only what its paper decides.
//!
//! Here: the books, their indices and the questions policies ask; `observe.rs` applies
//! an event to them; `placing.rs` holds the actions (dispatching, resetting,
//! migrating, repartitioning, powering) and undoes the refused ones.

use crate::action::{Action, MemoryDenial, TaskEndReason};
use crate::estimate::WindowMean;
use crate::event::Event;
use crate::free_order::{Busy, FreeOrder};
use crate::id_set::IdSet;
use crate::id_table::IdTable;
use crate::ids::{GpuId, TaskId, TenantId};
use crate::model::{GpuSpec, Placement, ServiceClass, TaskSpec, TenantSpec};
use crate::units::{Bytes, Nanos, PerMille};
use std::collections::BTreeMap;

mod gpu_state;
mod head_deque;
mod head_index;
mod load_order;
mod observe;
mod placing;
mod queues;
#[cfg(test)]
mod tests;

use head_deque::HeadDeque;

use gpu_state::PowerChange;
pub use gpu_state::{GpuState, RunningTask};
use head_index::HeadIndex;
use load_order::LoadOrder;

/// The node size above which [`Board::with_free_order`] keeps its index. On Flexy's
/// four-GPU node, keeping the index up to date on every event cost more than the sort
/// of the busy GPUs it spares, which Flexy asks for on about one event in ten: without
/// it `sim flexy --quick` counts 9% fewer instructions (24.13 -> 22.01 billion, issue
/// 55). At 40 GPUs and more the sort grows with the node on every question; the index
/// does not. (Measured while the index was set at every change of a GPU; it is now
/// set only for the GPUs changed since it was last read, [`Board::settle_free_order`].)
pub const FREE_ORDER_ABOVE: usize = 16;

/// How many recent durations per kernel predict a running task's completion time.
const KERNEL_HISTORY: usize = 10;

/// A task waiting in its tenant's queue.
#[derive(Clone, Debug)]
struct QueuedTask {
    spec: TaskSpec,
    submitted: Nanos,
    /// Global submission order; the oldest head-of-line task has the smallest.
    seq: u64,
}

/// A tenant's queue and counts. Laid out by hand: what a submission and a dispatch
/// read of it, its first queued task included ([`HeadDeque`]), fill its first pair of
/// cache lines, its spec comes after. At 100x the bench's node a tenant is touched once
/// a round of every tenant, and its fields spread over three lines were two misses at
/// each dispatch, its queue's buffer a third (issue 55).
#[derive(Clone, Debug)]
#[repr(C, align(128))]
struct TenantQueue {
    /// The submission order of its head-of-line task as indexed in [`Board::heads`],
    /// [`TenantQueue::NO_HEAD`] when its queue is empty ([`TenantQueue::head`]).
    head_seq: u64,
    /// Its class, its spec's, which never changes, held here too for the first lines
    /// ([`TenantQueue::class`]): the SLA of a user-facing tenant (zero for batch) and
    /// which of the two it is, 9 bytes where a `ServiceClass` takes 16 (with them the
    /// first queued task fits the pair of lines).
    sla: Nanos,
    running: u32,
    user_facing: bool,
    /// The tenant left while some of its tasks were running.
    leaving: bool,
    /// Whether it is pinned to some GPUs (its spec names any).
    pinned: bool,
    queue: HeadDeque<QueuedTask>,
    spec: TenantSpec,
}

// what a submission and a dispatch read: the first pair of cache lines
const _: () = assert!(std::mem::offset_of!(TenantQueue, spec) <= 128);

impl TenantQueue {
    /// No head: a submission order no run reaches.
    const NO_HEAD: u64 = u64::MAX;

    fn new(spec: &TenantSpec) -> TenantQueue {
        TenantQueue {
            queue: HeadDeque::default(),
            head_seq: Self::NO_HEAD,
            sla: match spec.class {
                ServiceClass::UserFacing { sla } => sla,
                ServiceClass::Batch => Nanos::ZERO,
            },
            user_facing: spec.class.is_user_facing(),
            running: 0,
            leaving: false,
            pinned: !spec.gpus.is_empty(),
            spec: spec.clone(),
        }
    }

    /// Its class (its spec's).
    #[inline]
    fn class(&self) -> ServiceClass {
        if self.user_facing {
            ServiceClass::UserFacing { sla: self.sla }
        } else {
            ServiceClass::Batch
        }
    }

    /// The submission order of its head-of-line task as indexed in [`Board::heads`].
    #[inline]
    fn head(&self) -> Option<u64> {
        Some(self.head_seq).filter(|s| *s != Self::NO_HEAD)
    }

    /// Whether it has tasks queued or running.
    #[inline]
    fn has_work(&self) -> bool {
        !self.queue.is_empty() || self.running > 0
    }
}

/// A task that finished, as [`Board::observe`] reports it to the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinishedTask {
    /// Its tenant's class.
    pub class: ServiceClass,
    /// How long it ran (measured by the driver).
    pub ran_for: Nanos,
    /// From submission to completion.
    pub latency: Nanos,
    /// True when it completed, false when its executor failed it.
    pub completed: bool,
}

/// The shared bookkeeping of a time-sharing policy.
#[derive(Clone, Debug)]
pub struct Board {
    gpus: Vec<(GpuSpec, GpuState)>,
    /// How many tasks may run at one placement (a whole GPU or one partition) at
    /// once: 1 for the exclusive policies of Flexy and schedGPU.
    colocation: usize,
    /// Migrations under way: tenant -> (from, to).
    migrating: BTreeMap<TenantId, (GpuId, GpuId)>,
    tenants: IdTable<TenantQueue>,
    /// Tenants with a non-empty queue, in id order (round-robin walks these): a bitset,
    /// since it changes on nearly every event.
    backlogged: IdSet,
    /// Per class (batch, user-facing), each backlogged tenant's head-of-line task as
    /// (submission order, tenant): the oldest head is the first entry, so the queries
    /// policies make on every event cost a tree look-up, not a walk of the tenants.
    /// Kept only for a policy that asks ([`Board::with_head_index`]).
    heads: Option<[HeadIndex; 2]>,
    /// Per class, whether [`Board::heads`] indexes it: a policy that asks only of
    /// user-facing heads (the node's) pays nothing for its batch tenants', whose
    /// index was kept up to date at every batch dispatch and submission for no one
    /// (issue 55). An unindexed class is answered by a walk. A bit per class index (a
    /// mask, not an array: the test runs at every reindex, and an array's bounds
    /// check cost every policy there).
    head_classes: u8,
    /// Per class, tasks queued and tasks running.
    queued_count: [usize; 2],
    running_count: [usize; 2],
    kernel_time: IdTable<WindowMean>,
    class_time: [WindowMean; 2],
    /// Whether the duration estimates above are kept: not for a policy that never asks
    /// ([`Board::without_estimates`]).
    estimates: bool,
    next_seq: u64,
    rr_cursor: Option<TenantId>,
    memory_used: Vec<Bytes>,
    memory_held: BTreeMap<(TenantId, GpuId), Bytes>,
    announced_pools: Option<Vec<GpuId>>,
    /// The idle GPUs (available, running nothing), by id: kept up to date at every
    /// change of a GPU's state, so that the policies' question on every event costs
    /// the idle GPUs, not a walk of the node.
    idle: IdSet,
    /// The whole GPUs with room for one more task, by (summed demand, tasks running,
    /// id): least-loaded placement takes the first. Kept only for a policy that asks
    /// ([`Board::with_load_order`]).
    with_room: Option<LoadOrder>,
    /// The busy GPUs by expected freeing, on an exclusive board (one task per GPU).
    /// Kept only for a policy that asks ([`Board::with_free_order`]).
    free_order: Option<FreeOrder>,
    /// Tenants whose queue's head or running count changed since the last
    /// [`Board::take_changed`] (kept only [`Board::with_change_log`]).
    changed: Option<Vec<TenantId>>,
}

fn class_index(class: ServiceClass) -> usize {
    usize::from(class.is_user_facing())
}

/// Which tenants a board query is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classes {
    /// Every tenant.
    All,
    /// User-facing tenants.
    UserFacing,
    /// Batch tenants.
    Batch,
}

impl Classes {
    /// User-facing if `user_facing`, else batch.
    pub fn of(user_facing: bool) -> Classes {
        if user_facing { Classes::UserFacing } else { Classes::Batch }
    }

    /// The class indices this selects as bits (batch 1, user-facing 2).
    fn mask(self) -> u8 {
        match self {
            Classes::All => 3,
            Classes::UserFacing => 2,
            Classes::Batch => 1,
        }
    }

    /// The class indices (batch 0, user-facing 1) this selects.
    fn indices(self) -> &'static [usize] {
        match self {
            Classes::All => &[0, 1],
            Classes::UserFacing => &[1],
            Classes::Batch => &[0],
        }
    }
}

impl Board {
    /// A board for these GPUs, all idle, with no tenants, that runs one task at a time
    /// per GPU or partition. It keeps the idle GPUs and the backlogged tenants; the
    /// other indices only when the policy asks for them ([`Board::with_head_index`],
    /// [`Board::with_load_order`], [`Board::with_free_order`]): an index no one reads
    /// costs on every event all the same (issue 55).
    pub fn new(gpus: &[GpuSpec]) -> Board {
        Board::with_colocation(gpus, 1)
    }

    /// A board that lets up to `per_placement` tasks run at once on one GPU or
    /// partition (the driver's model decides how they share it).
    pub fn with_colocation(gpus: &[GpuSpec], per_placement: usize) -> Board {
        let mut idle = IdSet::default();
        for g in gpus {
            idle.insert(u64::from(g.id.0));
        }
        Board {
            gpus: gpus.iter().map(|g| (g.clone(), GpuState::new())).collect(),
            colocation: per_placement.max(1),
            migrating: BTreeMap::new(),
            tenants: IdTable::default(),
            backlogged: IdSet::default(),
            heads: None,
            head_classes: 0,
            queued_count: [0; 2],
            running_count: [0; 2],
            kernel_time: IdTable::default(),
            class_time: [WindowMean::new(KERNEL_HISTORY), WindowMean::new(KERNEL_HISTORY)],
            estimates: true,
            next_seq: 0,
            rr_cursor: None,
            memory_used: vec![Bytes(0); gpus.len()],
            memory_held: BTreeMap::new(),
            announced_pools: None,
            idle,
            with_room: None,
            free_order: None,
            changed: None,
        }
    }

    /// Keep each class's oldest head-of-line task indexed, for a policy that asks for
    /// it on every event ([`Board::oldest_head`], [`Board::oldest_queued_since`]);
    /// without it they walk the backlogged tenants. Call before any event.
    pub fn with_head_index(self) -> Board {
        self.with_head_index_of(Classes::All)
    }

    /// [`Board::with_head_index`] for the tenants of `classes` only; the others'
    /// oldest head is found by a walk of the backlogged tenants.
    pub fn with_head_index_of(mut self, classes: Classes) -> Board {
        debug_assert!(self.tenants.iter().next().is_none(), "an index made before any event");
        self.heads = Some([HeadIndex::default(), HeadIndex::default()]);
        self.head_classes |= classes.mask();
        self
    }

    /// Keep no duration estimates, for a policy that never asks for one
    /// ([`Board::predicted_duration`], [`Board::expected_free_at`], ...): two running
    /// means updated at every finish cost a policy that never reads them all the same
    /// (issue 55). Asking such a board for an estimate is a bug (checked in debug
    /// builds).
    pub fn without_estimates(mut self) -> Board {
        self.estimates = false;
        self
    }

    /// Keep the whole GPUs with room in load order ([`Board::gpus_with_room_by_load`]);
    /// without it that sorts the node. Call before any event.
    pub fn with_load_order(mut self) -> Board {
        let mut order = LoadOrder::new(self.gpus.len());
        for (g, _) in &self.gpus {
            order.set(g.id.0, Some((0, 0)));
        }
        self.with_room = Some(order);
        self
    }

    /// Log the tenants whose queue's head or running count changes, for a policy that
    /// keeps something of each tenant's backlog up to date ([`Board::take_changed`]).
    pub fn with_change_log(mut self) -> Board {
        self.changed = Some(Vec::new());
        self
    }

    /// Move the tenants logged since the last call to `out` (some more than once).
    pub fn take_changed(&mut self, out: &mut Vec<TenantId>) {
        if let Some(c) = &mut self.changed {
            // (into an empty `out`, the two vectors swap: the node policy takes the
            // log twice per event, and an append was a call to copy it)
            if out.is_empty() {
                std::mem::swap(out, c);
            } else {
                out.append(c);
            }
        }
    }

    fn note_changed(&mut self, tenant: TenantId) {
        if let Some(c) = &mut self.changed {
            c.push(tenant);
        }
    }

    /// Keep the busy GPUs in the order of their expected freeing, on an exclusive
    /// board of more than [`FREE_ORDER_ABOVE`] GPUs ([`Board::first_busy_to_free`]);
    /// without it (a small node, or co-locating) that sorts the node. Call before any
    /// event.
    pub fn with_free_order(mut self) -> Board {
        if self.colocation <= 1 && self.gpus.len() > FREE_ORDER_ABOVE {
            self.free_order = Some(FreeOrder::new(self.gpus.len()));
        }
        self
    }

    /// Bring the GPU indices (the idle set, the load order, the free order) up to date
    /// with the GPU at `index`, after any change of its state.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    fn sync_gpu(&mut self, index: usize) {
        let Some((spec, state)) = self.gpus.get(index) else { return };
        let id = spec.id;
        if state.is_idle() {
            self.idle.insert(u64::from(id.0));
        } else {
            self.idle.remove(u64::from(id.0));
        }
        if self.with_room.is_some() || self.free_order.is_some() {
            self.sync_gpu_orders(index);
        }
    }

    /// [`Board::sync_gpu`]'s part for the load and free orders, out of line for the
    /// boards that keep neither (most: issue 55).
    #[inline(never)]
    fn sync_gpu_orders(&mut self, index: usize) {
        let Some((spec, state)) = self.gpus.get(index) else { return };
        let id = spec.id;
        if self.with_room.is_some() {
            let load = self
                .has_room(Placement::whole(id))
                .then(|| (state.demand(), state.running().len() as u32));
            if let Some(with_room) = &mut self.with_room {
                with_room.set(id.0, load);
            }
        }
        // (set when the order is read: [`Board::settle_free_order`])
        if let Some(order) = &mut self.free_order {
            order.mark(index);
        }
    }

    /// Bring the free order ([`Board::with_free_order`]) up to date with the GPUs
    /// whose state changed since it was last read; call before
    /// [`Board::first_busy_to_free`].
    pub fn settle_free_order(&mut self) {
        let Some(order) = &mut self.free_order else { return };
        while let Some(i) = order.pop_pending() {
            let Some((spec, state)) = self.gpus.get(i) else { continue };
            let busy = if state.is_idle() {
                None
            } else if let Some(until) = state.resetting_until {
                Some(Busy::Until(until))
            } else if !state.available {
                Some(Busy::Until(Nanos::MAX))
            } else {
                state.running().first().map(|r| Busy::Running {
                    kernel: r.spec.kernel,
                    class: class_index(r.class),
                    started: r.started,
                })
            };
            order.set(spec.id, busy);
        }
    }

    /// The idle GPUs, by id.
    pub fn idle_ids(&self) -> impl Iterator<Item = GpuId> + '_ {
        self.idle.iter().map(|g| GpuId(g as u32))
    }

    /// The first idle GPU with an id at or above `from`: a walk of the idle GPUs that
    /// lets the walker dispatch as it goes, without a list made per event. A dispatch
    /// changes only its own GPU, so the walk sees what a list taken first would.
    // (on every task's path: inlined, issue 55)
    #[inline]
    pub fn next_idle(&self, from: u32) -> Option<GpuId> {
        self.idle.first_from(u64::from(from)).map(|g| GpuId(g as u32))
    }

    /// Append to `out` the first `m` GPUs that are not idle, in the order of when each
    /// is expected to have room ([`Board::expected_free_at`]), ties going to those
    /// `in_pool` says (listed in ascending order in `pool`), then by id: Flexy's order;
    /// those `skip` says are passed over. An index on an exclusive board (O((m + pool) log n)); a sort of the node on a
    /// co-locating one.
    pub fn first_busy_to_free(
        &self,
        now: Nanos,
        m: usize,
        in_pool: &[bool],
        pool: &[GpuId],
        skip: &dyn Fn(GpuId) -> bool,
        out: &mut Vec<GpuId>,
    ) {
        if let Some(order) = &self.free_order {
            debug_assert!(order.is_settled(), "the free order read before it was settled");
            let predict = |kernel: u32, class: usize| self.predicted_duration_at(kernel, class);
            order.first(now, m, predict, in_pool, pool, skip, out);
            return;
        }
        let mut keys: Vec<(Nanos, bool, GpuId)> = self
            .gpu_ids()
            .filter(|g| !self.state(*g).is_idle() && !skip(*g))
            .map(|g| (self.expected_free_at(g, now), !in_pool[g.0 as usize], g))
            .collect();
        keys.sort_unstable();
        out.extend(keys.into_iter().take(m).map(|(_, _, g)| g));
    }

    /// The whole GPUs with room for one more task, least loaded first: by summed
    /// demand of what runs there, then tasks running, then id. A list made per call
    /// (for checks and status); placement asks [`Board::least_loaded_for`].
    pub fn gpus_with_room_by_load(&self) -> Vec<GpuId> {
        let mut all: Vec<_> = self
            .gpus
            .iter()
            .filter(|(spec, _)| self.has_room(Placement::whole(spec.id)))
            .map(|(spec, st)| (st.demand(), st.running().len() as u32, spec.id.0))
            .collect();
        all.sort_unstable();
        debug_assert!(
            self.with_room.as_ref().is_none_or(|w| w.sorted() == all),
            "the load order drifted from the GPUs' states"
        );
        all.into_iter().map(|(_, _, g)| GpuId(g)).collect()
    }

    /// The least loaded whole GPU with room for one more task where `tenant` may run
    /// (by summed demand, then tasks running, then id): the load order's first, for a
    /// tenant allowed everywhere; without the index, a sort of the node.
    pub fn least_loaded_for(&mut self, tenant: TenantId) -> Option<GpuId> {
        let pinned = self.tenants.get(tenant.0).map(|t| t.spec.gpus.as_slice()).unwrap_or(&[]);
        let Some(order) = &mut self.with_room else {
            return self.gpus_with_room_by_load().into_iter().find(|g| self.may_run_on(tenant, *g));
        };
        let found = order.first_where(|g| pinned.is_empty() || pinned.contains(&GpuId(g)));
        let found = found.map(GpuId);
        debug_assert_eq!(
            found,
            self.gpus_with_room_by_load().into_iter().find(|g| self.may_run_on(tenant, *g)),
            "the load order's choice for {tenant}"
        );
        found
    }

    /// Number of GPUs.
    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    /// GPU ids in order.
    pub fn gpu_ids(&self) -> impl Iterator<Item = GpuId> + '_ {
        self.gpus.iter().map(|(spec, _)| spec.id)
    }

    /// What `gpu` is doing. Panics on a GPU id the board was not built with: GPU ids
    /// come from the policy's own topology, never from clients.
    pub fn state(&self, gpu: GpuId) -> &GpuState {
        &self.gpus[gpu.0 as usize].1
    }

    /// How many tasks may run at once on one GPU or partition.
    pub fn colocation(&self) -> usize {
        self.colocation
    }

    /// Idle GPUs (available, running nothing), in id order.
    pub fn idle_gpus(&self) -> Vec<GpuId> {
        debug_assert!(
            self.idle_ids().eq(self
                .gpus
                .iter()
                .filter(|(_, s)| s.is_idle())
                .map(|(spec, _)| spec.id)),
            "the idle set drifted from the GPUs' states"
        );
        self.idle_ids().collect()
    }

    /// Whether `tenant`'s tasks may run on `gpu` (a tenant pinned to some GPUs, as a
    /// Slurm job's is, runs only there).
    pub fn may_run_on(&self, tenant: TenantId, gpu: GpuId) -> bool {
        self.tenants.get(tenant.0).is_none_or(|t| !t.pinned || t.spec.gpus.contains(&gpu))
    }

    /// Whether `placement` can take one more task now.
    pub fn has_room(&self, placement: Placement) -> bool {
        let Some((_, state)) = self.gpus.get(placement.gpu.0 as usize) else { return false };
        let partition_ok = match placement.partition {
            None => state.partitions.is_empty(),
            Some(p) => (p.0 as usize) < state.partitions.len(),
        };
        partition_ok && state.is_available() && state.running_at(placement) < self.colocation
    }

    /// Where this tenant's tasks run now (the GPU of its running tasks), if anywhere.
    pub fn tenant_gpus(&self, tenant: TenantId) -> impl Iterator<Item = GpuId> + '_ {
        self.gpus
            .iter()
            .filter(move |(_, s)| s.running().iter().any(|r| r.spec.tenant == tenant))
            .map(|(spec, _)| spec.id)
    }

    /// Whether `tenant` has tasks queued and none running: [`Board::queue_of`] and
    /// [`Board::tenant_runs`] in one look-up (the node policy asks on every event).
    pub fn waits(&self, tenant: TenantId) -> bool {
        let waits =
            self.tenants.get(tenant.0).is_some_and(|t| !t.queue.is_empty() && t.running == 0);
        debug_assert_eq!(waits, self.queue_of(tenant).0 > 0 && !self.tenant_runs(tenant));
        waits
    }

    /// Whether `tenant` has tasks queued or running, in one look-up (the node policy
    /// asks of every home at every sample).
    pub fn has_work(&self, tenant: TenantId) -> bool {
        let busy = self.tenants.get(tenant.0).is_some_and(TenantQueue::has_work);
        debug_assert_eq!(busy, self.queue_of(tenant).0 > 0 || self.tenant_runs(tenant));
        busy
    }

    /// Whether any of this tenant's tasks runs now: its count of running tasks, kept at
    /// each dispatch, finish and requeue, instead of [`Board::tenant_gpus`]'s walk of
    /// every GPU (which a policy asking it of every tenant on each event made O(GPUs²)
    /// per event: issue 55's node policy at 400 GPUs).
    pub fn tenant_runs(&self, tenant: TenantId) -> bool {
        let runs = self.tenants.get(tenant.0).is_some_and(|t| t.running > 0);
        debug_assert_eq!(runs, self.tenant_gpus(tenant).next().is_some(), "{tenant:?}'s count");
        runs
    }

    /// The tenants with queued tasks, in id order.
    pub fn backlogged(&self) -> impl Iterator<Item = TenantId> + '_ {
        self.backlogged.iter().map(TenantId)
    }

    /// The tenant's declared memory and what it holds per GPU.
    pub fn tenant_spec(&self, tenant: TenantId) -> Option<&TenantSpec> {
        self.tenants.get(tenant.0).map(|t| &t.spec)
    }

    /// [`Board::tenant_spec`] and [`Board::has_work`] in one look-up (the node policy's
    /// share step asks both of every home at every sample).
    #[inline]
    pub fn spec_and_work(&self, tenant: TenantId) -> Option<(&TenantSpec, bool)> {
        self.tenants.get(tenant.0).map(|t| (&t.spec, t.has_work()))
    }

    /// Whether `event` registers a tenant the board knows already: the board keeps the
    /// first registration and ignores the repeat ([`Board::observe`]), and a policy
    /// with books of its own ignores it too (before, fair queuing forgot the tenant's
    /// running quantum, and the node and DCUDA homed it anew).
    #[inline]
    pub fn is_repeated_registration(&self, event: &Event) -> bool {
        matches!(event, Event::TenantRegistered(spec) if self.tenants.get(spec.id.0).is_some())
    }

    /// Whether a migration of `tenant` is under way.
    pub fn is_migrating(&self, tenant: TenantId) -> bool {
        self.migrating.contains_key(&tenant)
    }

    /// Bring the head-of-line index and the backlog up to date with `tenant_id`'s
    /// queue, after its front changed.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    fn reindex(&mut self, tenant_id: TenantId) {
        self.note_changed(tenant_id);
        let Some(t) = self.tenants.get_mut(tenant_id.0) else { return };
        let class = class_index(t.class());
        let was_backlogged = t.head_seq != TenantQueue::NO_HEAD;
        t.head_seq = t.queue.front().map_or(TenantQueue::NO_HEAD, |front| front.seq);
        let head = t.head();
        match head {
            Some(_) if !was_backlogged => {
                self.backlogged.insert(tenant_id.0);
            }
            None if was_backlogged => {
                self.backlogged.remove(tenant_id.0);
            }
            _ => {}
        }
        if self.indexes_heads_of(class) {
            self.reindex_heads(tenant_id, class, head);
        }
    }

    /// Whether the head index keeps class index `class`'s heads.
    #[inline]
    fn indexes_heads_of(&self, class: usize) -> bool {
        self.head_classes & (1 << class) != 0
    }

    /// [`Board::reindex`]'s part for the head-of-line index, out of line: its closures
    /// made a frame that every policy's reindex paid for on every event, index or not
    /// (issue 55).
    #[inline(never)]
    fn reindex_heads(&mut self, tenant_id: TenantId, class: usize, head: Option<u64>) {
        let Some(heads) = &mut self.heads else { return };
        if let Some(seq) = head {
            heads[class].push(seq, tenant_id);
        }
        // the old head's entry, if it was on top, goes now (the top stays current)
        let tenants = &self.tenants;
        let backlogged = &self.backlogged;
        // (stale entries are bounded by the class's queued tasks, which bound its
        // current heads)
        heads[class].settle(
            self.queued_count[class],
            |seq, id| tenants.get(id.0).is_some_and(|t| t.head() == Some(seq)),
            || {
                backlogged
                    .iter()
                    .filter_map(|id| {
                        let t = tenants.get(id)?;
                        (class_index(t.class()) == class).then_some((t.head()?, TenantId(id)))
                    })
                    .collect()
            },
        );
    }

    /// Predicted duration of a task of `kernel` in `class`: the mean of the kernel's
    /// recent durations, else of the class's, else zero (nothing known yet).
    pub fn predicted_duration(&self, kernel: u32, class: ServiceClass) -> Nanos {
        self.predicted_duration_at(kernel, class_index(class))
    }

    fn predicted_duration_at(&self, kernel: u32, class: usize) -> Nanos {
        debug_assert!(self.estimates, "a board built without estimates was asked for one");
        self.kernel_time
            .get(u64::from(kernel))
            .and_then(WindowMean::mean)
            .or_else(|| self.class_time[class].mean())
            .unwrap_or(Nanos::ZERO)
    }

    /// Predicted end of a running task: its start plus the current prediction for its
    /// kernel (re-read every time, so tasks started before anything was known benefit
    /// from what has been learnt since). `None` while nothing is known.
    pub fn predicted_end(&self, task: &RunningTask) -> Option<Nanos> {
        let d = self.predicted_duration(task.spec.kernel, task.class);
        (d > Nanos::ZERO).then_some(task.started + d)
    }

    /// When `gpu` is expected to have room for a task: now if it has room, the
    /// earliest predicted end of its tasks (never in the past; [`Nanos::MAX`] while
    /// nothing is known of their kernels or classes, so that a GPU known to free soon
    /// is preferred), the end of its reset, or never while powered down.
    pub fn expected_free_at(&self, gpu: GpuId, now: Nanos) -> Nanos {
        let state = self.state(gpu);
        if state.available && state.running().len() < self.colocation {
            return now;
        }
        if let Some(until) = state.resetting_until {
            return until.max(now);
        }
        if !state.available {
            return Nanos::MAX;
        }
        let end = |r: &RunningTask| self.predicted_end(r).unwrap_or(Nanos::MAX);
        match state.running() {
            // the exclusive case, without the iterator
            [only] => end(only).max(now),
            many => many.iter().map(end).min().unwrap_or(now).max(now),
        }
    }

    /// In debug builds, check the indexes against the queues they summarise.
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            let mut queued = [0; 2];
            for (id, t) in self.tenants.iter() {
                let id = &TenantId(id);
                assert_eq!(t.class(), t.spec.class, "class of {id}");
                assert_eq!(t.pinned, !t.spec.gpus.is_empty(), "pinning of {id}");
                let c = class_index(t.class());
                queued[c] += t.queue.len();
                assert_eq!(t.queue.is_empty(), !self.backlogged.contains(id.0), "backlog of {id}");
                assert_eq!(t.head(), t.queue.front().map(|q| q.seq), "head of {id}");
                if let (Some(seq), Some(heads), true) =
                    (t.head(), &self.heads, self.indexes_heads_of(c))
                {
                    assert!(heads[c].holds(seq, *id), "head index of {id}");
                    let top = heads[c].first().expect("a backlogged tenant's class has a head");
                    assert!(top <= (seq, *id), "the head index's top is not the oldest");
                    let current = self.tenants.get(top.1.0).and_then(|t| t.head());
                    assert_eq!(current, Some(top.0), "the head index's top is stale");
                }
            }
            assert_eq!(queued, self.queued_count, "queued counts");
            let mut running = [0; 2];
            for (_, g) in &self.gpus {
                for r in g.running() {
                    running[class_index(r.class)] += 1;
                }
            }
            assert_eq!(running, self.running_count, "running counts");
        }
    }

    /// `gpu`'s memory capacity (zero for a GPU the node does not have).
    pub fn gpu_memory(&self, gpu: GpuId) -> Bytes {
        self.gpus.get(gpu.0 as usize).map_or(Bytes(0), |(spec, _)| spec.memory)
    }

    /// Memory currently granted on `gpu`.
    pub fn memory_used(&self, gpu: GpuId) -> Bytes {
        self.memory_used[gpu.0 as usize]
    }
}
