//! Bookkeeping shared by the time-sharing policies: what each GPU is doing, the
//! per-tenant FIFO queues, per-kernel duration estimates, and a simple memory book.
//!
//! A policy owns one [`Board`], feeds it every event with [`Board::observe`], then
//! makes its decisions with the helpers here ([`Board::dispatch`], [`Board::reset`],
//! [`Board::oldest_head`], ...). Keeping this out of the policies means a policy
//! module holds only what its paper decides.

use crate::action::{Action, MemoryDenial, TaskEndReason};
use crate::estimate::WindowMean;
use crate::event::Event;
use crate::ids::{GpuId, TaskId, TenantId};
use crate::model::{GpuSpec, Placement, ServiceClass, TaskSpec, TenantSpec};
use crate::units::{Bytes, Nanos};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

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

/// A task running on a GPU.
#[derive(Clone, Debug)]
pub struct RunningTask {
    /// The task.
    pub spec: TaskSpec,
    /// Its tenant's class.
    pub class: ServiceClass,
    /// When it was submitted (kept across a reset and re-issue).
    pub submitted: Nanos,
    /// When it started on this GPU.
    pub started: Nanos,
    seq: u64,
}

/// What a GPU is doing, as far as the policy knows.
#[derive(Clone, Debug)]
pub enum GpuState {
    /// Free to take a task.
    Idle,
    /// Running one task.
    Running(RunningTask),
    /// Resetting; expected back at `until`.
    Resetting {
        /// Expected end of the reset.
        until: Nanos,
    },
}

#[derive(Clone, Debug)]
struct TenantQueue {
    spec: TenantSpec,
    queue: VecDeque<QueuedTask>,
    /// The tenant left while some of its tasks were running.
    leaving: bool,
    running: usize,
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
    tenants: BTreeMap<TenantId, TenantQueue>,
    /// Tenants with a non-empty queue: the queries a policy makes on every event walk
    /// these, so their cost does not grow with idle tenants.
    backlogged: BTreeSet<TenantId>,
    /// Where each live task is: in which tenant's queue, or running.
    task_tenant: BTreeMap<TaskId, TenantId>,
    kernel_time: BTreeMap<u32, WindowMean>,
    class_time: [WindowMean; 2],
    next_seq: u64,
    rr_cursor: Option<TenantId>,
    memory_used: Vec<Bytes>,
    memory_held: BTreeMap<(TenantId, GpuId), Bytes>,
    announced_pools: Option<Vec<GpuId>>,
}

fn class_index(class: ServiceClass) -> usize {
    usize::from(class.is_user_facing())
}

impl Board {
    /// A board for these GPUs, all idle, with no tenants.
    pub fn new(gpus: &[GpuSpec]) -> Board {
        Board {
            gpus: gpus.iter().map(|g| (g.clone(), GpuState::Idle)).collect(),
            tenants: BTreeMap::new(),
            backlogged: BTreeSet::new(),
            task_tenant: BTreeMap::new(),
            kernel_time: BTreeMap::new(),
            class_time: [WindowMean::new(KERNEL_HISTORY), WindowMean::new(KERNEL_HISTORY)],
            next_seq: 0,
            rr_cursor: None,
            memory_used: vec![Bytes(0); gpus.len()],
            memory_held: BTreeMap::new(),
            announced_pools: None,
        }
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

    /// Idle GPUs, in id order.
    pub fn idle_gpus(&self) -> Vec<GpuId> {
        self.gpus
            .iter()
            .filter(|(_, s)| matches!(s, GpuState::Idle))
            .map(|(spec, _)| spec.id)
            .collect()
    }

    /// Apply an event to the books. Emits the actions that follow from bookkeeping
    /// alone (ending a leaving tenant's queued tasks, answering memory requests) and
    /// returns the finished task, if the event finished one, for the policy's estimators.
    pub fn observe(
        &mut self,
        now: Nanos,
        event: &Event,
        out: &mut Vec<Action>,
    ) -> Option<FinishedTask> {
        match event {
            Event::TenantRegistered(spec) => {
                self.tenants.entry(spec.id).or_insert_with(|| TenantQueue {
                    spec: spec.clone(),
                    queue: VecDeque::new(),
                    leaving: false,
                    running: 0,
                });
            }
            Event::TenantLeft { tenant } => self.tenant_left(*tenant, out),
            Event::TaskSubmitted(spec) => self.submit(now, spec, out),
            Event::TaskCancelRequested { task } => self.cancel(*task, out),
            Event::TaskFinished { task, placement, ran_for, result, .. } => {
                return self.finished(now, *task, *placement, *ran_for, result.is_ok());
            }
            Event::GpuResetDone { gpu } => {
                if let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize)
                    && matches!(state, GpuState::Resetting { .. })
                {
                    *state = GpuState::Idle;
                }
            }
            Event::MemoryRequested { request, tenant, gpu, bytes, wait: _ } => {
                // Time-sharing policies admit memory first-come first-served without a
                // wait queue: grant if it fits now, else refuse. The schedGPU policies
                // replace this with queued, ordered admission.
                let reason = match self.gpus.get(gpu.0 as usize) {
                    None => Some(MemoryDenial::ExceedsCapacity),
                    Some((spec, _)) if *bytes > spec.memory => Some(MemoryDenial::ExceedsCapacity),
                    Some((spec, _))
                        if self.memory_used[gpu.0 as usize].0 + bytes.0 > spec.memory.0 =>
                    {
                        Some(MemoryDenial::NotAvailableNow)
                    }
                    Some(_) => None,
                };
                match reason {
                    Some(reason) => out.push(Action::DenyMemory { request: *request, reason }),
                    None => {
                        self.memory_used[gpu.0 as usize].0 += bytes.0;
                        self.memory_held.entry((*tenant, *gpu)).or_default().0 += bytes.0;
                        out.push(Action::GrantMemory { request: *request });
                    }
                }
            }
            Event::MemoryFreed { tenant, gpu, bytes } => {
                // Freeing more than is held releases what is held and nothing more: the
                // books never go negative whatever a client claims.
                if let Some(held) = self.memory_held.get_mut(&(*tenant, *gpu)) {
                    let freed = held.0.min(bytes.0);
                    held.0 -= freed;
                    self.memory_used[gpu.0 as usize].0 -= freed;
                }
            }
            Event::DemandSampled { .. }
            | Event::MigrationDone { .. }
            | Event::RepartitionDone { .. }
            | Event::ActionRefused { .. }
            | Event::MemorySampled { .. }
            | Event::MigrationFailed { .. }
            | Event::RepartitionFailed { .. }
            | Event::GpuPowerChanged { .. }
            | Event::Tick => {}
        }
        None
    }

    fn submit(&mut self, now: Nanos, spec: &TaskSpec, out: &mut Vec<Action>) {
        let Some(tenant) = self.tenants.get_mut(&spec.tenant).filter(|t| !t.leaving) else {
            out.push(Action::EndTask { task: spec.id, reason: TaskEndReason::UnknownTenant });
            return;
        };
        if self.task_tenant.contains_key(&spec.id) {
            // Drivers allocate task ids; a duplicate is a driver bug, not client input.
            debug_assert!(false, "task {} submitted twice", spec.id);
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        tenant.queue.push_back(QueuedTask { spec: spec.clone(), submitted: now, seq });
        self.backlogged.insert(spec.tenant);
        self.task_tenant.insert(spec.id, spec.tenant);
    }

    fn cancel(&mut self, task: TaskId, out: &mut Vec<Action>) {
        let Some(tenant_id) = self.task_tenant.get(&task).copied() else { return };
        let Some(tenant) = self.tenants.get_mut(&tenant_id) else { return };
        if let Some(pos) = tenant.queue.iter().position(|q| q.spec.id == task) {
            tenant.queue.remove(pos);
            if tenant.queue.is_empty() {
                self.backlogged.remove(&tenant_id);
            }
            self.task_tenant.remove(&task);
            out.push(Action::EndTask { task, reason: TaskEndReason::CancelledByClient });
        }
    }

    fn tenant_left(&mut self, tenant_id: TenantId, out: &mut Vec<Action>) {
        let Some(tenant) = self.tenants.get_mut(&tenant_id) else { return };
        self.backlogged.remove(&tenant_id);
        for queued in tenant.queue.drain(..) {
            self.task_tenant.remove(&queued.spec.id);
            out.push(Action::EndTask { task: queued.spec.id, reason: TaskEndReason::TenantLeft });
        }
        if tenant.running == 0 {
            self.tenants.remove(&tenant_id);
        } else {
            tenant.leaving = true;
        }
        let held: Vec<_> = self
            .memory_held
            .range((tenant_id, GpuId(0))..=(tenant_id, GpuId(u32::MAX)))
            .map(|(k, v)| (*k, *v))
            .collect();
        for ((_, gpu), bytes) in held {
            self.memory_used[gpu.0 as usize].0 -= bytes.0;
            self.memory_held.remove(&(tenant_id, gpu));
        }
    }

    fn finished(
        &mut self,
        now: Nanos,
        task: TaskId,
        placement: Placement,
        ran_for: Nanos,
        completed: bool,
    ) -> Option<FinishedTask> {
        let (_, state) = self.gpus.get_mut(placement.gpu.0 as usize)?;
        // A finish for a task that is not the one running there is stale (its GPU was
        // reset under it); the reset already re-queued the task.
        let GpuState::Running(running) = state else { return None };
        if running.spec.id != task {
            return None;
        }
        let running = running.clone();
        *state = GpuState::Idle;
        self.task_tenant.remove(&task);
        if completed {
            self.kernel_time
                .entry(running.spec.kernel)
                .or_insert_with(|| WindowMean::new(KERNEL_HISTORY))
                .push(ran_for);
            self.class_time[class_index(running.class)].push(ran_for);
        }
        if let Some(tenant) = self.tenants.get_mut(&running.spec.tenant) {
            tenant.running -= 1;
            if tenant.leaving && tenant.running == 0 {
                self.tenants.remove(&running.spec.tenant);
            }
        }
        Some(FinishedTask {
            class: running.class,
            ran_for,
            latency: now - running.submitted,
            completed,
        })
    }

    /// Predicted duration of a task of `kernel` in `class`: the mean of the kernel's
    /// recent durations, else of the class's, else zero (nothing known yet).
    pub fn predicted_duration(&self, kernel: u32, class: ServiceClass) -> Nanos {
        self.kernel_time
            .get(&kernel)
            .and_then(WindowMean::mean)
            .or_else(|| self.class_time[class_index(class)].mean())
            .unwrap_or(Nanos::ZERO)
    }

    /// Predicted end of a running task: its start plus the current prediction for its
    /// kernel (re-read every time, so tasks started before anything was known benefit
    /// from what has been learnt since). `None` while nothing is known.
    pub fn predicted_end(&self, task: &RunningTask) -> Option<Nanos> {
        let d = self.predicted_duration(task.spec.kernel, task.class);
        (d > Nanos::ZERO).then_some(task.started + d)
    }

    /// When `gpu` is expected to be free: now if idle, the predicted end of its task
    /// (never in the past; [`Nanos::MAX`] while nothing is known of its kernel or
    /// class, so that a GPU known to free soon is preferred), or the end of its reset.
    pub fn expected_free_at(&self, gpu: GpuId, now: Nanos) -> Nanos {
        match self.state(gpu) {
            GpuState::Idle => now,
            GpuState::Running(r) => self.predicted_end(r).unwrap_or(Nanos::MAX).max(now),
            GpuState::Resetting { until } => (*until).max(now),
        }
    }

    /// The tenants with queued tasks, in id order.
    fn backlogged_tenants(&self) -> impl Iterator<Item = &TenantQueue> {
        debug_assert!(
            self.tenants.iter().all(|(id, t)| t.queue.is_empty() != self.backlogged.contains(id))
                && self.backlogged.iter().all(|id| self.tenants.contains_key(id)),
            "the backlog index is out of step with the queues"
        );
        self.backlogged.iter().filter_map(|id| self.tenants.get(id))
    }

    /// Number of queued (not running) tasks of tenants matching `class_filter`.
    pub fn queued(&self, class_filter: impl Fn(ServiceClass) -> bool) -> usize {
        self.backlogged_tenants()
            .filter(|t| class_filter(t.spec.class))
            .map(|t| t.queue.len())
            .sum()
    }

    /// Number of running tasks of tenants matching `class_filter`.
    pub fn running(&self, class_filter: impl Fn(ServiceClass) -> bool) -> usize {
        self.gpus
            .iter()
            .filter(|(_, s)| matches!(s, GpuState::Running(r) if class_filter(r.class)))
            .count()
    }

    /// Submission time of the oldest queued task matching `class_filter`.
    pub fn oldest_queued_since(
        &self,
        class_filter: impl Fn(ServiceClass) -> bool,
    ) -> Option<Nanos> {
        self.backlogged_tenants()
            .filter(|t| class_filter(t.spec.class))
            .filter_map(|t| t.queue.front())
            .map(|q| q.submitted)
            .min()
    }

    /// The tenant whose head-of-line task was submitted first, among tenants matching
    /// `class_filter` with a non-empty queue (first-come first-served across tenants).
    pub fn oldest_head(&self, class_filter: impl Fn(ServiceClass) -> bool) -> Option<TenantId> {
        self.backlogged_tenants()
            .filter(|t| class_filter(t.spec.class))
            .filter_map(|t| t.queue.front().map(|q| (q.seq, t.spec.id)))
            .min()
            .map(|(_, id)| id)
    }

    /// The next tenant after the round-robin cursor with a non-empty queue (Flexy
    /// §II-A), and advance the cursor to it.
    pub fn next_round_robin(&mut self) -> Option<TenantId> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = self.rr_cursor.map_or(Unbounded, Excluded);
        let next = self
            .backlogged
            .range((from, Unbounded))
            .next()
            .or_else(|| self.backlogged.iter().next())
            .copied();
        if next.is_some() {
            self.rr_cursor = next;
        }
        next
    }

    /// Dispatch `tenant`'s head-of-line task to idle `gpu`. Does nothing if the GPU is
    /// not idle or the queue is empty (callers choose both from the board, so neither
    /// happens; the check keeps the invariant local).
    pub fn dispatch(&mut self, now: Nanos, gpu: GpuId, tenant: TenantId, out: &mut Vec<Action>) {
        if !matches!(self.state(gpu), GpuState::Idle) {
            return;
        }
        let Some(t) = self.tenants.get_mut(&tenant) else { return };
        let Some(q) = t.queue.pop_front() else { return };
        if t.queue.is_empty() {
            self.backlogged.remove(&tenant);
        }
        t.running += 1;
        let class = t.spec.class;
        out.push(Action::Dispatch { task: q.spec.id, placement: Placement::whole(gpu) });
        self.gpus[gpu.0 as usize].1 = GpuState::Running(RunningTask {
            spec: q.spec,
            class,
            submitted: q.submitted,
            started: now,
            seq: q.seq,
        });
    }

    /// Reset `gpu`: its running task (if any) goes back to the head of its tenant's
    /// queue, keeping its submission time and order, and the GPU is unavailable until
    /// [`Event::GpuResetDone`] (expected after `latency`).
    pub fn reset(&mut self, now: Nanos, gpu: GpuId, latency: Nanos, out: &mut Vec<Action>) {
        let state = std::mem::replace(
            &mut self.gpus[gpu.0 as usize].1,
            GpuState::Resetting { until: now + latency },
        );
        let killed = match state {
            GpuState::Running(r) => {
                let id = r.spec.id;
                if let Some(t) = self.tenants.get_mut(&r.spec.tenant) {
                    t.running -= 1;
                    if t.leaving {
                        // Its tenant is gone: the killed task cannot be re-issued.
                        self.task_tenant.remove(&id);
                        out.push(Action::ResetGpu { gpu, killed: Some(id) });
                        out.push(Action::EndTask { task: id, reason: TaskEndReason::TenantLeft });
                        if t.running == 0 {
                            self.tenants.remove(&r.spec.tenant);
                        }
                        return;
                    }
                    let tenant = r.spec.tenant;
                    t.queue.push_front(QueuedTask {
                        spec: r.spec,
                        submitted: r.submitted,
                        seq: r.seq,
                    });
                    self.backlogged.insert(tenant);
                }
                Some(id)
            }
            GpuState::Idle | GpuState::Resetting { .. } => None,
        };
        out.push(Action::ResetGpu { gpu, killed });
    }

    /// Emit [`Action::SetPools`] if the user-facing pool differs from the last one
    /// announced. `user_facing` is in any order; the batch pool is every other GPU.
    pub fn announce_pools(&mut self, mut user_facing: Vec<GpuId>, out: &mut Vec<Action>) {
        user_facing.sort_unstable();
        if self.announced_pools.as_ref() == Some(&user_facing) {
            return;
        }
        let batch = self.gpu_ids().filter(|g| !user_facing.contains(g)).collect();
        out.push(Action::SetPools { user_facing: user_facing.clone(), batch });
        self.announced_pools = Some(user_facing);
    }

    /// Memory currently granted on `gpu`.
    pub fn memory_used(&self, gpu: GpuId) -> Bytes {
        self.memory_used[gpu.0 as usize]
    }
}
