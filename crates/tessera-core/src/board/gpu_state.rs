//! What the board knows of one GPU: the tasks running there, whether it is resetting
//! or powered, and its spatial partitions.

use crate::ids::TaskId;
use crate::model::{Placement, ServiceClass, TaskSpec};
use crate::units::{Nanos, PerMille};

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
    /// Where it runs (after a migration, where it moved to).
    pub placement: Placement,
    /// For a request dispatched in a batch, the batch's first task (the execution it
    /// belongs to); `None` for a task run alone.
    pub batch_lead: Option<TaskId>,
    pub(super) seq: u64,
}

impl RunningTask {
    /// The share of a GPU it asks for, per mille: its launch's occupancy-derived demand
    /// when the driver knows it, else the whole GPU.
    pub fn demand(&self) -> PerMille {
        self.spec.launch.map_or(PerMille(1000), |l| l.demand)
    }
}

/// A power state change asked for and not yet acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PowerChange {
    Down,
    Up,
}

/// What a GPU is doing, as far as the policy knows: the tasks running on it (several
/// when the board co-locates, see [`super::Board::with_colocation`]), whether it is resetting
/// or powered down, and its spatial partitions.
#[derive(Clone, Debug)]
pub struct GpuState {
    /// Changed only through the methods below, which keep `executions` with it.
    running: Vec<RunningTask>,
    /// Executions running per placement (a batch counts once, by its lead), kept at
    /// every change of `running`: [`GpuState::running_at`] is asked for every gpu-let
    /// on every serving event, and walking the running requests was a ninth of `tessera
    /// sim gpulets` (issue 55). A few entries: one per partition in use.
    executions: Vec<(Placement, usize)>,
    /// Cache of [`GpuState::is_available`] (asked on every event by every policy),
    /// refreshed by [`GpuState::refresh`] whenever what it derives from changes.
    pub(super) available: bool,
    pub(super) resetting_until: Option<Nanos>,
    pub(super) powered: bool,
    pub(super) power_change: Option<PowerChange>,
    pub(super) partitions: Vec<PerMille>,
    pub(super) pending_partitions: Option<Vec<PerMille>>,
}

impl GpuState {
    pub(super) fn new() -> GpuState {
        GpuState {
            running: Vec::new(),
            executions: Vec::new(),
            available: true,
            resetting_until: None,
            powered: true,
            power_change: None,
            partitions: Vec::new(),
            pending_partitions: None,
        }
    }

    /// The tasks running on it (in no particular order).
    pub fn running(&self) -> &[RunningTask] {
        &self.running
    }

    /// Able to take work: powered, no power change under way, not resetting.
    pub fn is_available(&self) -> bool {
        self.available
    }

    pub(super) fn refresh(&mut self) {
        self.available =
            self.powered && self.power_change.is_none() && self.resetting_until.is_none();
    }

    /// Available and running nothing.
    pub fn is_idle(&self) -> bool {
        self.is_available() && self.running.is_empty()
    }

    /// When its reset is expected to end, if it is resetting.
    pub fn resetting_until(&self) -> Option<Nanos> {
        self.resetting_until
    }

    /// Powered (a power-down asked for counts as down at once; a power-up counts only
    /// once acknowledged).
    pub fn is_powered(&self) -> bool {
        self.powered && self.power_change != Some(PowerChange::Down)
    }

    /// Its spatial partitions' shares (empty: not partitioned).
    pub fn partitions(&self) -> &[PerMille] {
        &self.partitions
    }

    /// Whether a repartition was asked for and is not done yet.
    pub fn is_repartitioning(&self) -> bool {
        self.pending_partitions.is_some()
    }

    /// Summed demand of its running tasks, per mille of the GPU (may exceed 1000).
    pub fn demand(&self) -> u32 {
        self.running.iter().map(|r| u32::from(r.demand().0)).sum()
    }

    /// Executions running at `placement` (a batch counts once).
    pub fn running_at(&self, placement: Placement) -> usize {
        let n = self.executions.iter().find(|(p, _)| *p == placement).map_or(0, |(_, n)| *n);
        debug_assert_eq!(
            n,
            self.running.iter().filter(|r| r.placement == placement && counts(r)).count(),
            "the executions kept at {placement:?}"
        );
        n
    }

    /// Count `r` in (`up`) or out of its placement's executions.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    fn count(&mut self, r: &RunningTask, up: bool) {
        if !counts(r) {
            return;
        }
        if !up {
            self.uncount(r.placement);
            return;
        }
        match self.executions.iter().position(|(p, _)| *p == r.placement) {
            Some(i) => self.executions[i].1 += 1,
            None => self.executions.push((r.placement, 1)),
        }
    }

    /// One execution fewer at `placement`.
    fn uncount(&mut self, placement: Placement) {
        match self.executions.iter().position(|(p, _)| *p == placement) {
            Some(i) => {
                self.executions[i].1 -= 1;
                if self.executions[i].1 == 0 {
                    self.executions.swap_remove(i);
                }
            }
            None => debug_assert!(false, "an execution at {placement:?} was not counted"),
        }
    }

    /// `r` starts running here.
    // (on every task's path: inlined, issue 55)
    #[inline]
    pub(super) fn push_running(&mut self, r: RunningTask) {
        self.count(&r, true);
        self.running.push(r);
    }

    /// The running task at index `i` ends here.
    // (on every task's path: inlined, issue 55)
    #[inline]
    pub(super) fn remove_running(&mut self, i: usize) {
        let r = &self.running[i];
        if counts(r) {
            let placement = r.placement;
            self.uncount(placement);
        }
        self.running.swap_remove(i);
    }

    /// Every running task leaves (a reset).
    pub(super) fn take_running(&mut self) -> Vec<RunningTask> {
        self.executions.clear();
        std::mem::take(&mut self.running)
    }

    /// The running tasks `leave` says leave; the rest stay.
    pub(super) fn split_running(
        &mut self,
        leave: impl Fn(&RunningTask) -> bool,
    ) -> Vec<RunningTask> {
        let (leaving, staying): (Vec<_>, Vec<_>) = self.running.drain(..).partition(leave);
        self.running = staying;
        for r in &leaving {
            self.count(r, false);
        }
        leaving
    }

    /// The index of running task `task`, if it runs here.
    pub(super) fn position(&self, task: crate::TaskId) -> Option<usize> {
        self.running.iter().position(|r| r.spec.id == task)
    }
}

/// Whether `r` is an execution of its own (a task alone, or a batch's lead).
fn counts(r: &RunningTask) -> bool {
    r.batch_lead.is_none_or(|l| l == r.spec.id)
}
