//! Least-loaded co-location: tasks are taken first-come first-served across tenants
//! and each goes to the available GPU with the least summed demand, up to `per_gpu`
//! tasks at once on one GPU; the driver's model decides how co-running tasks share it.
//!
//! This is DCUDA's least-loaded placement baseline (§5: "a new application is placed
//! on the GPU with the least load"), applied per task rather than per application, and
//! the simplest policy that puts several tenants' work on one GPU at the same moment.
//! DCUDA's own monitor, balancer and migration come with its issue, on this board.

use crate::action::Action;
use crate::board::{Board, Classes};
use crate::event::Event;
use crate::model::GpuSpec;
use crate::policy::Policy;
use crate::units::Nanos;

/// The least-loaded co-locating policy.
#[derive(Debug)]
pub struct LeastLoaded {
    board: Board,
}

impl LeastLoaded {
    /// Least-loaded over `gpus`, up to `per_gpu` co-running tasks per GPU.
    pub fn new(gpus: &[GpuSpec], per_gpu: usize) -> LeastLoaded {
        LeastLoaded {
            board: Board::with_colocation(gpus, per_gpu)
                .with_head_index()
                .with_load_order()
                .without_estimates(),
        }
    }
}

impl Policy for LeastLoaded {
    fn label(&self) -> String {
        format!("LeastLoaded{}", self.board.colocation())
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.board.observe(now, event, actions);
        while let Some(tenant) = self.board.oldest_head(Classes::All) {
            // least summed demand, then fewest tasks, then lowest id
            let target = self.board.least_loaded_for(tenant);
            // none with room (for a pinned tenant: none of its GPUs): the oldest waits,
            // and so, first come first served, do the others
            let Some(gpu) = target else { break };
            self.board.dispatch(now, gpu, tenant, actions);
        }
    }
}
