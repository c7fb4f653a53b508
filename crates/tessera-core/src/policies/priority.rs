//! Priority scheduling (Flexy §II-B, §II-D): every free GPU takes a user-facing task
//! if one waits, else a batch task. Variants from §II-D:
//! - minimum reservation K: GPUs 0..K take user-facing tasks only;
//! - reset, as the paper defines its baseline: when user-facing tasks wait and "all
//!   accelerators are busy with batch tasks" (§IV-A), kill as many batch tasks as there
//!   are waiting user-facing tasks (§II-D: "kills as many batch tasks as the number of
//!   waiting user-facing tasks and reissues them later"), longest expected remaining
//!   time first. While any GPU is idle, resetting or running user-facing work, nothing
//!   is reset. §II-C3's rule on the remaining time of the batch task is Flexy's, not
//!   this baseline's, so any batch task may be killed (but one already past its
//!   expected end, which is about to free its GPU).
//!
//! Within a class, the oldest head-of-line task goes first (the paper leaves the order
//! among tenants of one class open; first-come first-served minimises the worst wait).

use super::{resettable_batch_gpus, user_facing_capable};
use crate::action::Action;
use crate::board::{Board, Classes};
use crate::event::Event;
use crate::ids::GpuId;
use crate::model::GpuSpec;
use crate::policy::Policy;
use crate::units::Nanos;

/// The priority policy and its variants.
#[derive(Debug)]
pub struct Priority {
    board: Board,
    reserve: usize,
    reset: Option<Nanos>,
    /// The reserved GPUs: the first `reserve`.
    reserved_gpus: Vec<GpuId>,
}

impl Priority {
    /// Priority over `gpus` with `reserve` GPUs for user-facing work only and, with
    /// `reset`, GPU reset of that latency.
    pub fn new(gpus: &[GpuSpec], reserve: usize, reset: Option<Nanos>) -> Priority {
        let reserved_gpus =
            gpus.iter().map(|g| g.id).filter(|g| (g.0 as usize) < reserve).collect();
        Priority { board: Board::new(gpus).with_head_index(), reserve, reset, reserved_gpus }
    }

    fn reserved(&self, gpu: GpuId) -> bool {
        (gpu.0 as usize) < self.reserve
    }
}

impl Policy for Priority {
    fn label(&self) -> String {
        match self.reset {
            Some(_) => "P-Reset".into(),
            None => format!("P-MinRes{}", self.reserve),
        }
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.board.observe(now, event, actions);
        self.board.announce_pools(&self.reserved_gpus, actions);

        let mut from = 0;
        while self.board.any_queued()
            && let Some(gpu) = self.board.next_idle(from)
        {
            from = gpu.0 + 1;
            let tenant = self.board.oldest_head(Classes::UserFacing).or_else(|| {
                if self.reserved(gpu) { None } else { self.board.oldest_head(Classes::Batch) }
            });
            if let Some(tenant) = tenant {
                self.board.dispatch(now, gpu, tenant, actions);
            }
        }

        let Some(latency) = self.reset else { return };
        // §II-D and §IV-A together: only when every GPU runs batch work, kill as many
        // batch tasks as there are waiting user-facing tasks.
        let waiting = self.board.queued(Classes::UserFacing);
        if waiting == 0 || user_facing_capable(&self.board, |_| true) > 0 {
            return;
        }
        // remaining time > 0: every running batch task not yet past its expected end
        for gpu in
            resettable_batch_gpus(&self.board, now, Nanos::ZERO, |_| true).into_iter().take(waiting)
        {
            self.board.reset(now, gpu, latency, actions);
        }
    }
}
