//! schedGPU's memory-safe co-scheduling (schedGPU §3-§5): applications ask for GPU
//! memory before allocating it and return it after freeing it; a request that does not
//! fit waits, and when memory is freed a notification policy decides which waiters get
//! it. Nobody ever allocates beyond capacity, so nobody crashes out of memory.
//!
//! The decision functions ([`select_grants`], [`admits_immediately`]) are shared by the
//! in-process [`MemSafe`] policy that the simulator drives and by the cross-process
//! ledger (`tessera-ledger`), which runs them under its file lock.
//!
//! The four notification policies (§5), as implemented; where the paper's wording is
//! open, the choice is stated:
//! - **FIFO**: waiters in arrival order; grant while the head fits; stop at the first
//!   that does not ("even if there was a subsequent waiting client that could be
//!   scheduled").
//! - **MMU** (maximum memory utilisation): every waiter that fits, in arrival order
//!   (first fit).
//! - **Priority FIFO**: the highest-priority group first, first fit within it ("if there
//!   is insufficient memory to serve this request ... a following client with the same
//!   priority is served"); lower groups only once every member of the higher group has
//!   been served.
//! - **Priority MMU**: groups from the highest priority, first fit within each; a group
//!   none of whose members fits blocks the groups below it ("if no clients in the queue
//!   with the highest priority can be attended to, then clients continue waiting").
//!
//! A new request is granted at once only if it fits and the policy would not have served
//! a waiter first: FIFO lets nobody pass a waiter; Priority FIFO lets nobody pass a waiter
//! of the same or higher priority; Priority MMU lets nobody pass a higher-priority
//! waiter; MMU lets any request that fits through.

use crate::action::{Action, MemoryDenial};
use crate::board::{Board, Classes};
use crate::event::{Event, MemoryWait};
use crate::ids::{GpuId, MemRequestId, TenantId};
use crate::model::GpuSpec;
use crate::policy::Policy;
use crate::units::{Bytes, Nanos};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which waiters are served when memory is freed (schedGPU §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationPolicy {
    /// First-in, first-out.
    #[default]
    Fifo,
    /// Maximum memory utilisation (first fit).
    Mmu,
    /// Priority, FIFO within a priority.
    PriorityFifo,
    /// Priority, MMU within a priority.
    PriorityMmu,
}

impl NotificationPolicy {
    /// All four, in the paper's order.
    pub const ALL: [NotificationPolicy; 4] = [
        NotificationPolicy::Fifo,
        NotificationPolicy::Mmu,
        NotificationPolicy::PriorityFifo,
        NotificationPolicy::PriorityMmu,
    ];

    /// The paper's name.
    pub fn label(self) -> &'static str {
        match self {
            NotificationPolicy::Fifo => "FIFO",
            NotificationPolicy::Mmu => "MMU",
            NotificationPolicy::PriorityFifo => "Priority FIFO",
            NotificationPolicy::PriorityMmu => "Priority MMU",
        }
    }

    fn uses_priority(self) -> bool {
        matches!(self, NotificationPolicy::PriorityFifo | NotificationPolicy::PriorityMmu)
    }
}

/// A waiting request for memory on one GPU, as the policies see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// How much it wants.
    pub bytes: Bytes,
    /// Its priority; higher first (priority policies only).
    pub priority: u8,
    /// Arrival order; smaller first.
    pub seq: u64,
}

/// Which of `waiting` (all on one GPU with `free` bytes free) to grant, as indices into
/// `waiting`, in grant order.
pub fn select_grants(policy: NotificationPolicy, free: Bytes, waiting: &[Waiter]) -> Vec<usize> {
    let (mut order, mut granted) = (Vec::new(), Vec::new());
    select_grants_into(policy, free, waiting, &mut order, &mut granted);
    granted
}

/// [`select_grants`] into `granted`, with `order` as scratch: both cleared first, and
/// kept by a caller that decides on every freeing (the simulator's policy) so that a
/// decision allocates nothing (issue 55).
pub fn select_grants_into(
    policy: NotificationPolicy,
    free: Bytes,
    waiting: &[Waiter],
    order: &mut Vec<usize>,
    granted: &mut Vec<usize>,
) {
    order.clear();
    granted.clear();
    order.extend(0..waiting.len());
    if policy.uses_priority() {
        order.sort_by_key(|&i| (std::cmp::Reverse(waiting[i].priority), waiting[i].seq));
    } else {
        order.sort_by_key(|&i| waiting[i].seq);
    }
    let mut free = free.0;
    match policy {
        NotificationPolicy::Fifo => {
            for &i in order.iter() {
                if waiting[i].bytes.0 > free {
                    break;
                }
                free -= waiting[i].bytes.0;
                granted.push(i);
            }
        }
        NotificationPolicy::Mmu => {
            for &i in order.iter() {
                if waiting[i].bytes.0 <= free {
                    free -= waiting[i].bytes.0;
                    granted.push(i);
                }
            }
        }
        NotificationPolicy::PriorityFifo | NotificationPolicy::PriorityMmu => {
            for group in order.chunk_by(|&a, &b| waiting[a].priority == waiting[b].priority) {
                let before = granted.len();
                for &i in group {
                    if waiting[i].bytes.0 <= free {
                        free -= waiting[i].bytes.0;
                        granted.push(i);
                    }
                }
                let served = granted.len() - before;
                let blocked = match policy {
                    NotificationPolicy::PriorityFifo => served < group.len(),
                    _ => served == 0,
                };
                if blocked {
                    break;
                }
            }
        }
    }
}

/// Whether a new request for `bytes` at `priority` is granted at once on a GPU with
/// `free` bytes free and these waiters, rather than queued behind them.
pub fn admits_immediately(
    policy: NotificationPolicy,
    free: Bytes,
    bytes: Bytes,
    priority: u8,
    waiting: &[Waiter],
) -> bool {
    if bytes > free {
        return false;
    }
    match policy {
        NotificationPolicy::Fifo => waiting.is_empty(),
        NotificationPolicy::Mmu => true,
        NotificationPolicy::PriorityFifo => waiting.iter().all(|w| w.priority < priority),
        NotificationPolicy::PriorityMmu => waiting.iter().all(|w| w.priority <= priority),
    }
}

#[derive(Clone, Debug)]
struct Pending {
    request: MemRequestId,
    tenant: TenantId,
    waiter: Waiter,
    deadline: Option<Nanos>,
}

/// The schedGPU policy for the simulator and the daemon: memory admission with a wait
/// queue per GPU and a notification policy; tasks are dispatched first-come
/// first-served to free GPUs.
#[derive(Debug)]
pub struct MemSafe {
    board: Board,
    policy: NotificationPolicy,
    capacity: Vec<Bytes>,
    used: Vec<Bytes>,
    held: BTreeMap<(TenantId, GpuId), Bytes>,
    priority: BTreeMap<TenantId, u8>,
    waiting: Vec<Vec<Pending>>,
    /// No waiter's deadline is earlier than this (`None`: no waiter has one): the
    /// queues are walked for timeouts only once it has passed, not on every event.
    next_deadline: Option<Nanos>,
    next_seq: u64,
    /// Buffers the decisions reuse, so that none allocates (issue 55: at 400 GPUs a
    /// tenant's leaving notifies every GPU, four notifications per task).
    scratch: Scratch,
}

/// [`MemSafe`]'s reused buffers; empty between calls.
#[derive(Debug, Default)]
struct Scratch {
    views: Vec<Waiter>,
    order: Vec<usize>,
    chosen: Vec<usize>,
    granted: Vec<Pending>,
}

impl MemSafe {
    /// schedGPU over `gpus` with `policy`.
    pub fn new(gpus: &[GpuSpec], policy: NotificationPolicy) -> MemSafe {
        MemSafe {
            board: Board::new(gpus).with_head_index().without_estimates(),
            policy,
            capacity: gpus.iter().map(|g| g.memory).collect(),
            used: vec![Bytes(0); gpus.len()],
            held: BTreeMap::new(),
            priority: BTreeMap::new(),
            waiting: vec![Vec::new(); gpus.len()],
            next_deadline: None,
            next_seq: 0,
            scratch: Scratch::default(),
        }
    }

    /// Memory granted on `gpu` (never above its capacity).
    pub fn used(&self, gpu: GpuId) -> Bytes {
        self.used[gpu.0 as usize]
    }

    fn grant(
        &mut self,
        request: MemRequestId,
        tenant: TenantId,
        gpu: GpuId,
        bytes: Bytes,
        out: &mut Vec<Action>,
    ) {
        let g = gpu.0 as usize;
        debug_assert!(self.used[g].0 + bytes.0 <= self.capacity[g].0);
        self.used[g].0 += bytes.0;
        self.held.entry((tenant, gpu)).or_default().0 += bytes.0;
        out.push(Action::GrantMemory { request });
    }

    fn notify(&mut self, gpu: GpuId, out: &mut Vec<Action>) {
        let g = gpu.0 as usize;
        if self.waiting[g].is_empty() {
            // no waiter, no grant (the decision on an empty queue is empty)
            return;
        }
        let free = Bytes(self.capacity[g].0 - self.used[g].0);
        let s = &mut self.scratch;
        s.views.clear();
        s.views.extend(self.waiting[g].iter().map(|p| p.waiter));
        select_grants_into(self.policy, free, &s.views, &mut s.order, &mut s.chosen);
        s.chosen.sort_unstable_by(|a, b| b.cmp(a)); // remove from the back first
        let mut granted = std::mem::take(&mut s.granted);
        granted.extend(s.chosen.iter().map(|&i| self.waiting[g].remove(i)));
        granted.sort_by_key(|p| p.waiter.seq);
        for p in granted.drain(..) {
            self.grant(p.request, p.tenant, gpu, p.waiter.bytes, out);
        }
        self.scratch.granted = granted;
    }

    fn expire(&mut self, now: Nanos, out: &mut Vec<Action>) {
        if self.next_deadline.is_none_or(|d| d > now) {
            return;
        }
        let mut next: Option<Nanos> = None;
        for queue in &mut self.waiting {
            queue.retain(|p| {
                let expired = p.deadline.is_some_and(|d| d <= now);
                if expired {
                    out.push(Action::DenyMemory {
                        request: p.request,
                        reason: MemoryDenial::TimedOut,
                    });
                } else if let Some(d) = p.deadline {
                    next = Some(next.map_or(d, |n| n.min(d)));
                }
                !expired
            });
        }
        self.next_deadline = next;
    }

    fn memory_event(&mut self, now: Nanos, event: &Event, out: &mut Vec<Action>) -> bool {
        match event {
            Event::TenantRegistered(spec) => {
                self.priority.insert(spec.id, spec.priority);
                false
            }
            Event::MemoryRequested { request, tenant, gpu, bytes, wait } => {
                let g = gpu.0 as usize;
                let Some(capacity) = self.capacity.get(g).copied() else {
                    out.push(Action::DenyMemory {
                        request: *request,
                        reason: MemoryDenial::ExceedsCapacity,
                    });
                    return true;
                };
                if *bytes > capacity {
                    out.push(Action::DenyMemory {
                        request: *request,
                        reason: MemoryDenial::ExceedsCapacity,
                    });
                    return true;
                }
                let priority = self.priority.get(tenant).copied().unwrap_or(0);
                let free = Bytes(capacity.0 - self.used[g].0);
                let views = &mut self.scratch.views;
                views.clear();
                views.extend(self.waiting[g].iter().map(|p| p.waiter));
                if admits_immediately(self.policy, free, *bytes, priority, views) {
                    self.grant(*request, *tenant, *gpu, *bytes, out);
                    return true;
                }
                let deadline = match wait {
                    MemoryWait::NoWait => {
                        out.push(Action::DenyMemory {
                            request: *request,
                            reason: MemoryDenial::NotAvailableNow,
                        });
                        return true;
                    }
                    MemoryWait::Timeout(t) => Some(now + *t),
                    MemoryWait::Forever => None,
                };
                let seq = self.next_seq;
                self.next_seq += 1;
                if let Some(d) = deadline {
                    self.next_deadline = Some(self.next_deadline.map_or(d, |n| n.min(d)));
                }
                self.waiting[g].push(Pending {
                    request: *request,
                    tenant: *tenant,
                    waiter: Waiter { bytes: *bytes, priority, seq },
                    deadline,
                });
                true
            }
            Event::MemoryFreed { tenant, gpu, bytes } => {
                if let Some(held) = self.held.get_mut(&(*tenant, *gpu)) {
                    let freed = held.0.min(bytes.0);
                    held.0 -= freed;
                    self.used[gpu.0 as usize].0 -= freed;
                    self.notify(*gpu, out);
                }
                true
            }
            Event::TenantLeft { tenant } => {
                let held: Vec<(GpuId, Bytes)> = self
                    .held
                    .iter()
                    .filter(|((t, _), _)| t == tenant)
                    .map(|((_, g), b)| (*g, *b))
                    .collect();
                for (gpu, bytes) in held {
                    self.held.remove(&(*tenant, gpu));
                    self.used[gpu.0 as usize].0 -= bytes.0;
                }
                for queue in &mut self.waiting {
                    queue.retain(|p| {
                        if p.tenant == *tenant {
                            out.push(Action::DenyMemory {
                                request: p.request,
                                reason: MemoryDenial::TenantLeft,
                            });
                        }
                        p.tenant != *tenant
                    });
                }
                self.priority.remove(tenant);
                for g in 0..self.capacity.len() {
                    self.notify(GpuId(g as u32), out);
                }
                false
            }
            Event::Tick => {
                self.expire(now, out);
                false
            }
            _ => false,
        }
    }
}

impl Policy for MemSafe {
    fn label(&self) -> String {
        format!("schedGPU {}", self.policy.label())
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.expire(now, actions);
        if self.memory_event(now, event, actions) {
            return;
        }
        self.board.observe(now, event, actions);
        let mut from = 0;
        while self.board.any_queued()
            && let Some(gpu) = self.board.next_idle(from)
        {
            from = gpu.0 + 1;
            if let Some(tenant) = self.board.oldest_head(Classes::All) {
                self.board.dispatch(now, gpu, tenant, actions);
            }
        }
    }

    fn tick_interval(&self) -> Option<Nanos> {
        // Timeouts are checked on every event and at least this often.
        Some(Nanos::from_millis(100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(mib: u64, priority: u8, seq: u64) -> Waiter {
        Waiter { bytes: Bytes::mib(mib), priority, seq }
    }

    /// The four policies on one queue, worked by hand.
    #[test]
    fn notification_policies_choose_as_the_paper_describes() {
        // 1000 MiB free; queue in arrival order: 800 (p0), 300 (p1), 150 (p0), 500 (p1)
        let q = [w(800, 0, 0), w(300, 1, 1), w(150, 0, 2), w(500, 1, 3)];
        let free = Bytes::mib(1000);
        // FIFO: 800 fits (200 left); 300 does not: stop.
        assert_eq!(select_grants(NotificationPolicy::Fifo, free, &q), vec![0]);
        // MMU: 800 (200 left), skip 300, 150 (50 left), skip 500.
        assert_eq!(select_grants(NotificationPolicy::Mmu, free, &q), vec![0, 2]);
        // Priority FIFO: group p1 = [300, 500] both fit (200 left); group p0 = [800, 150]:
        // 800 does not fit, 150 does (first fit within the group).
        assert_eq!(select_grants(NotificationPolicy::PriorityFifo, free, &q), vec![1, 3, 2]);
        // Priority MMU: the same here.
        assert_eq!(select_grants(NotificationPolicy::PriorityMmu, free, &q), vec![1, 3, 2]);

        // 600 MiB free: p1 group = 300 fits (300 left), 500 does not.
        let free = Bytes::mib(600);
        // Priority FIFO stops: a p1 waiter is unserved.
        assert_eq!(select_grants(NotificationPolicy::PriorityFifo, free, &q), vec![1]);
        // Priority MMU serves a p1 waiter, so it goes on to p0: 800 no, 150 yes.
        assert_eq!(select_grants(NotificationPolicy::PriorityMmu, free, &q), vec![1, 2]);
        // With 200 MiB free nothing of p1 fits: Priority MMU blocks p0 too.
        assert!(select_grants(NotificationPolicy::PriorityMmu, Bytes::mib(200), &q).is_empty());
        assert_eq!(select_grants(NotificationPolicy::Mmu, Bytes::mib(200), &q), vec![2]);
    }

    #[test]
    fn new_requests_pass_waiters_only_where_the_policy_allows() {
        let q = [w(800, 1, 0)];
        let free = Bytes::mib(500);
        let small = Bytes::mib(100);
        assert!(!admits_immediately(NotificationPolicy::Fifo, free, small, 0, &q));
        assert!(admits_immediately(NotificationPolicy::Mmu, free, small, 0, &q));
        assert!(!admits_immediately(NotificationPolicy::PriorityFifo, free, small, 1, &q));
        assert!(admits_immediately(NotificationPolicy::PriorityFifo, free, small, 2, &q));
        assert!(!admits_immediately(NotificationPolicy::PriorityMmu, free, small, 0, &q));
        assert!(admits_immediately(NotificationPolicy::PriorityMmu, free, small, 1, &q));
        assert!(!admits_immediately(NotificationPolicy::Mmu, free, Bytes::mib(501), 9, &[]));
    }

    /// The buffers a caller keeps between decisions hold nothing over: each decision
    /// with dirty buffers is the one made with fresh ones.
    #[test]
    fn reused_buffers_decide_as_fresh_ones() {
        let queues = [
            vec![w(800, 0, 0), w(300, 1, 1), w(150, 0, 2), w(500, 1, 3)],
            vec![],
            vec![w(100, 2, 7), w(100, 2, 9)],
            vec![w(2000, 0, 1), w(10, 0, 2)],
        ];
        let (mut order, mut granted) = (vec![9, 9, 9], vec![5, 5]);
        for policy in NotificationPolicy::ALL {
            for q in &queues {
                for free in [0, 150, 600, 1000, 5000] {
                    let free = Bytes::mib(free);
                    select_grants_into(policy, free, q, &mut order, &mut granted);
                    assert_eq!(
                        granted,
                        select_grants(policy, free, q),
                        "{policy:?} {q:?} {free:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn granted_memory_never_exceeds_capacity() {
        for policy in NotificationPolicy::ALL {
            let q = [w(400, 2, 0), w(400, 0, 1), w(400, 1, 2), w(100, 0, 3)];
            let got = select_grants(policy, Bytes::mib(900), &q);
            let sum: u64 = got.iter().map(|&i| q[i].bytes.0).sum();
            assert!(sum <= Bytes::mib(900).0, "{policy:?}");
        }
    }
}
