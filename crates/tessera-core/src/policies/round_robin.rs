//! Round-robin (Flexy §II-A): the next non-empty tenant, in turn, issues its
//! head-of-line task to the first free GPU, whatever its class. The paper's baseline,
//! standing for the default behaviour of CUDA streams shared by several applications.

use crate::action::Action;
use crate::board::Board;
use crate::event::Event;
use crate::model::GpuSpec;
use crate::policy::Policy;
use crate::units::Nanos;

/// The round-robin policy.
#[derive(Debug)]
pub struct RoundRobin {
    board: Board,
}

impl RoundRobin {
    /// Round-robin over `gpus`.
    pub fn new(gpus: &[GpuSpec]) -> RoundRobin {
        RoundRobin { board: Board::new(gpus).without_estimates() }
    }
}

impl Policy for RoundRobin {
    fn label(&self) -> String {
        "RoundRobin".into()
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.board.observe(now, event, actions);
        let mut from = 0;
        while self.board.any_queued()
            && let Some(gpu) = self.board.next_idle(from)
        {
            from = gpu.0 + 1;
            // none for this GPU (tenants pinned elsewhere): the next GPU may suit one
            let Some(tenant) = self.board.next_round_robin_on(gpu) else { continue };
            self.board.dispatch(now, gpu, tenant, actions);
        }
    }
}
