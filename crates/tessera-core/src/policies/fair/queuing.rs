//! [`FairQueuing`]: FairGV's fair queuing as a policy of its own, the [`FairQueue`]
//! mechanism over every GPU of a board it owns (the composed node policy runs the same
//! mechanism over the GPUs outside its pool).

use super::{FairQueue, Tags, VirtualTime};
use crate::action::Action;
use crate::board::Board;
use crate::event::Event;
use crate::ids::{GpuId, TenantId};
use crate::model::GpuSpec;
use crate::policy::Policy;
use crate::units::Nanos;
use std::collections::BTreeMap;

/// FairGV's fair queuing over one or more GPUs (one quantum per tenant at a time): the
/// [`FairQueue`] over every GPU of a board of its own.
#[derive(Debug)]
pub struct FairQueuing {
    pub(super) board: Board,
    pub(super) queue: FairQueue,
    /// Scratch: the idle GPUs of an event (kept, not made per event).
    idle: Vec<GpuId>,
}

impl FairQueuing {
    /// Fair queuing over `gpus`.
    pub fn new(gpus: &[GpuSpec]) -> FairQueuing {
        FairQueuing {
            board: Board::new(gpus).without_estimates(),
            queue: FairQueue::new(Nanos::ZERO),
            idle: Vec::new(),
        }
    }

    /// Wait up to `spin` for a tenant whose turn it is and whose queue ran dry (§3.2.2:
    /// a client that submits one request at a time needs a moment to submit the next;
    /// without this wait, the GPU would go to another tenant every time, and a tenant
    /// could never receive more than every other quantum).
    pub fn with_spin(mut self, spin: Nanos) -> FairQueuing {
        self.queue.spin = spin;
        self
    }

    /// The global virtual time: the smallest start tag of the active tenants.
    pub fn virtual_time(&self) -> VirtualTime {
        self.queue.virtual_time()
    }

    /// The tags `tenant` is queued under (its group's, if it has one).
    pub fn tags(&self, tenant: TenantId) -> Option<Tags> {
        self.queue.tags(tenant)
    }

    /// Service received so far, ns, per tenant.
    pub fn service(&self) -> BTreeMap<TenantId, u64> {
        self.queue.service()
    }

    /// Change a tenant's weight (its group's, if it has one), from its next quantum on.
    pub fn set_weight(&mut self, tenant: TenantId, weight: u32) {
        self.queue.set_weight(tenant, weight);
    }
}

impl Policy for FairQueuing {
    fn label(&self) -> String {
        "FairGV".into()
    }

    fn tick_interval(&self) -> Option<Nanos> {
        // lingering ends on a tick when no other event comes first
        (self.queue.spin > Nanos::ZERO).then_some(self.queue.spin)
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        // (before, a repeat forgot the tenant's running quantum)
        if self.board.is_repeated_registration(event) {
            return;
        }
        let finished = self.board.finishing(event);
        self.board.observe(now, event, actions);
        self.queue.observe(&self.board, now, event, finished);
        let mut idle = std::mem::take(&mut self.idle);
        idle.clear();
        // (pushed one by one: `extend` was a call of its own per event, issue 55)
        for g in self.board.idle_ids() {
            idle.push(g);
        }
        self.queue.dispatch(&mut self.board, now, &idle, &|_, _| true, actions);
        self.idle = idle;
    }
}
