//! The discrete-event engine: replays a [`Workload`] against a policy over the
//! [`PerfModel`], and checks the core's invariants on every action.
//!
//! Events at the same instant are processed in the order they were scheduled. When a
//! task completes, the policy hears of the completion first and the job's next task is
//! submitted after it, at the same instant: in a real node the client learns of the
//! completion before it can submit again, so a freed GPU may already have been given
//! to another tenant (this is what makes Flexy's minimum reservation matter).

use crate::metrics::{RunMetrics, TaskEnd, TaskRecord};
use crate::perf::PerfModel;
use crate::workload::{Submission, Workload};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tessera_core::action::TaskEndReason;
use tessera_core::event::Event;
use tessera_core::{Action, GpuId, GpuSpec, Nanos, Placement, Policy, TaskId, TaskSpec, TenantId};
use tessera_gpu::sharing::SharedGpu;
pub use tessera_gpu::sharing::Sharing;

/// A run could not complete: the policy broke an invariant, or work was lost.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    /// The policy asked for something impossible (two tasks on one GPU, a task
    /// dispatched twice, pools that do not partition the GPUs, ...).
    #[error("policy {policy} broke an invariant at t={at_ns} ns: {what}")]
    PolicyViolation {
        /// The policy's label.
        policy: String,
        /// Simulated time.
        at_ns: u64,
        /// What it did.
        what: String,
    },
    /// Nothing was left to happen but some tasks never ended: the policy lost them.
    #[error("policy {policy} stalled: {unfinished} tasks never ended")]
    Stalled {
        /// The policy's label.
        policy: String,
        /// How many.
        unfinished: usize,
    },
    /// The run exceeded its event budget (a policy looping on itself).
    #[error("event budget of {0} exceeded")]
    EventBudget(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SimEvent {
    JobArrives(usize),
    TaskEnds { gpu: GpuId, task: TaskId, generation: u64 },
    ResetEnds(GpuId),
    Tick,
}

#[derive(Clone, Debug)]
struct GpuSim {
    /// The shared-GPU model (`tessera-gpu`), exclusive here: it decides when the
    /// running task finishes, so that exclusive use is the one-piece case of the same
    /// model the sharing policies will use, not a second code path.
    model: SharedGpu,
    /// Running tasks and when each started (at most one when exclusive).
    running: Vec<(TaskId, Nanos)>,
    resetting: bool,
    generation: u64,
    busy: Nanos,
}

impl GpuSim {
    fn new(sharing: Sharing) -> GpuSim {
        GpuSim {
            model: SharedGpu::new(sharing),
            running: Vec::new(),
            resetting: false,
            generation: 0,
            busy: Nanos::ZERO,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct JobSim {
    next_task: usize,
    ended: usize,
}

impl JobSim {
    fn outstanding(&self) -> usize {
        self.next_task - self.ended
    }
}

/// Options of one run.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The node's GPUs.
    pub gpus: Vec<GpuSpec>,
    /// The performance model.
    pub perf: PerfModel,
    /// Keep every user-facing task's latency in the metrics (for latency CDFs).
    pub keep_latencies: bool,
    /// Abort after this many events.
    pub event_budget: u64,
    /// How a GPU's running tasks share it: `Exclusive` (one at a time, Flexy's
    /// testbed; a dispatch to a busy GPU is a policy violation) or a sharing mode of
    /// `tessera-gpu`, under which tasks dispatched to a busy GPU co-run.
    pub sharing: Sharing,
}

/// One simulation run in progress.
#[derive(Debug)]
pub struct Simulation<'w> {
    opts: SimOptions,
    workload: &'w Workload,
    policy: Box<dyn Policy>,
    now: Nanos,
    seq: u64,
    queue: BinaryHeap<Reverse<(Nanos, u64, SimEvent)>>,
    gpus: Vec<GpuSim>,
    jobs: Vec<JobSim>,
    tasks: Vec<TaskRecord>,
    actions: Vec<Action>,
    pool_user_facing: usize,
    pool_weighted: u128,
    k_weighted: u128,
    last_sample: Nanos,
    resets: u64,
    events: u64,
    tasks_open: usize,
}

impl<'w> Simulation<'w> {
    /// A run of `workload` under `policy`.
    pub fn new(
        workload: &'w Workload,
        policy: Box<dyn Policy>,
        opts: SimOptions,
    ) -> Simulation<'w> {
        let gpus = vec![GpuSim::new(opts.sharing); opts.gpus.len()];
        Simulation {
            opts,
            workload,
            policy,
            now: Nanos::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            gpus,
            jobs: vec![JobSim::default(); workload.jobs.len()],
            tasks: Vec::with_capacity(workload.task_count()),
            actions: Vec::new(),
            pool_user_facing: 0,
            pool_weighted: 0,
            k_weighted: 0,
            last_sample: Nanos::ZERO,
            resets: 0,
            events: 0,
            tasks_open: 0,
        }
    }

    fn schedule(&mut self, at: Nanos, event: SimEvent) {
        self.queue.push(Reverse((at, self.seq, event)));
        self.seq += 1;
    }

    fn violation(&self, what: impl Into<String>) -> SimError {
        SimError::PolicyViolation {
            policy: self.policy.label(),
            at_ns: self.now.0,
            what: what.into(),
        }
    }

    /// Run to completion and return what was measured.
    pub fn run(mut self) -> Result<RunMetrics, SimError> {
        for (i, job) in self.workload.jobs.iter().enumerate() {
            self.schedule(job.arrival, SimEvent::JobArrives(i));
        }
        let start = self.workload.jobs.iter().map(|j| j.arrival).min().unwrap_or(Nanos::ZERO);
        self.last_sample = start;
        if let Some(period) = self.policy.tick_interval() {
            self.schedule(start + period, SimEvent::Tick);
        }
        let mut queued_sum: u64 = 0;
        while let Some(Reverse((at, _, event))) = self.queue.pop() {
            self.events += 1;
            queued_sum += self.queue.len() as u64 + 1;
            if self.events > self.opts.event_budget {
                return Err(SimError::EventBudget(self.opts.event_budget));
            }
            self.sample_gauges(at);
            self.now = at;
            match event {
                SimEvent::JobArrives(i) => self.job_arrives(i)?,
                SimEvent::TaskEnds { gpu, task, generation } => {
                    self.task_ends(gpu, task, generation)?
                }
                SimEvent::ResetEnds(gpu) => {
                    self.gpus[gpu.0 as usize].resetting = false;
                    self.deliver(Event::GpuResetDone { gpu })?;
                }
                SimEvent::Tick => {
                    // Ticks keep coming only while work remains, so the run can end.
                    if self.work_remains() {
                        self.deliver(Event::Tick)?;
                        if let Some(period) = self.policy.tick_interval() {
                            self.schedule(self.now + period, SimEvent::Tick);
                        }
                    }
                }
            }
        }
        let unfinished = self.tasks.iter().filter(|t| t.end.is_none()).count()
            + self
                .workload
                .jobs
                .iter()
                .zip(&self.jobs)
                .map(|(j, s)| j.tasks.len() - s.next_task)
                .sum::<usize>();
        if unfinished > 0 {
            return Err(SimError::Stalled { policy: self.policy.label(), unfinished });
        }
        let span = self.now - start;
        let mean_queue_len = queued_sum as f64 / self.events.max(1) as f64;
        Ok(RunMetrics::from_records(
            &self.tasks,
            // exclusive: the runs' own durations, as the paper's NVSMI measured; shared:
            // time with anything running (NVSMI's busy fraction; the runs overlap)
            self.gpus
                .iter()
                .map(|g| match self.opts.sharing {
                    Sharing::Exclusive => g.busy,
                    _ => Nanos(g.model.usage().busy_ns.round() as u64),
                })
                .collect(),
            span,
            self.resets,
            self.events,
            ratio(self.pool_weighted, span),
            ratio(self.k_weighted, span),
            self.opts.keep_latencies,
        ))
        .map(|m| RunMetrics { mean_queue_len, ..m })
    }

    fn work_remains(&self) -> bool {
        self.tasks_open > 0
            || self.jobs.iter().zip(&self.workload.jobs).any(|(s, j)| s.ended < j.tasks.len())
    }

    /// Accumulate time-weighted pool size and K up to `at`.
    fn sample_gauges(&mut self, at: Nanos) {
        let dt = u128::from((at - self.last_sample).0);
        self.pool_weighted += dt * self.pool_user_facing as u128;
        self.k_weighted += dt * self.policy.min_reservation() as u128;
        self.last_sample = at;
    }

    fn job_arrives(&mut self, i: usize) -> Result<(), SimError> {
        let job = &self.workload.jobs[i];
        self.deliver(Event::TenantRegistered(job.tenant.clone()))?;
        for _ in 0..job.window.max(1) {
            self.submit_next(i)?;
        }
        if job.tasks.is_empty() {
            self.deliver(Event::TenantLeft { tenant: job.tenant.id })?;
        }
        Ok(())
    }

    fn submit_next(&mut self, job_index: usize) -> Result<(), SimError> {
        let job = &self.workload.jobs[job_index];
        let state = &mut self.jobs[job_index];
        if state.next_task >= job.tasks.len() {
            return Ok(());
        }
        let work = job.tasks[state.next_task];
        state.next_task += 1;
        let id = TaskId(self.tasks.len() as u64);
        self.tasks.push(TaskRecord {
            job: job_index,
            class: job.tenant.class,
            work,
            submitted: self.now,
            last_start: None,
            kills: 0,
            end: None,
        });
        self.tasks_open += 1;
        let spec = TaskSpec {
            launch: None,
            batch: 1,
            id,
            tenant: job.tenant.id,
            kernel: job.kernel,
            memory: tessera_core::Bytes(0),
        };
        self.deliver(Event::TaskSubmitted(spec))
    }

    fn task_ends(&mut self, gpu: GpuId, task: TaskId, generation: u64) -> Result<(), SimError> {
        let g = &mut self.gpus[gpu.0 as usize];
        if g.generation != generation {
            // killed by a reset, or (sharing) superseded by a later prediction
            return Ok(());
        }
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        // every piece due now, one at a time (no allocation on this hot path); several
        // may end at one instant when shared, taken in the model's order
        let mut ended = 0;
        loop {
            let g = &mut self.gpus[gpu.0 as usize];
            let id = match g.model.pop_finished(self.now.0) {
                Ok(Some(id)) => id,
                Ok(None) => break,
                Err(e) => return Err(self.violation(format!("{gpu}: {e}"))),
            };
            if exclusive && (id != task.0 || !g.model.is_empty()) {
                return Err(self.violation(format!(
                    "{task} ended on {gpu} but the GPU model finished task {id}"
                )));
            }
            let finished = TaskId(id);
            let Some(i) = g.running.iter().position(|(t, _)| *t == finished) else {
                return Err(
                    self.violation(format!("{finished} finished on {gpu} but was not running"))
                );
            };
            let (_, started) = g.running.remove(i);
            let ran_for = self.now - started;
            g.busy += ran_for;
            ended += 1;
            self.task_done(gpu, finished, ran_for)?;
        }
        if ended == 0 {
            return Err(
                self.violation(format!("{task} ended on {gpu} but the GPU model had nothing due"))
            );
        }
        if !exclusive {
            // the remaining tasks' finishes moved: predict again
            self.predict_next(gpu);
        }
        Ok(())
    }

    /// Schedule the next finish on `gpu` from its model, superseding any earlier
    /// prediction.
    fn predict_next(&mut self, gpu: GpuId) {
        let g = &mut self.gpus[gpu.0 as usize];
        g.generation += 1;
        let generation = g.generation;
        if let Some((at, id)) = g.model.next_finish() {
            self.schedule(Nanos(at), SimEvent::TaskEnds { gpu, task: TaskId(id), generation });
        }
    }

    fn task_done(&mut self, gpu: GpuId, task: TaskId, ran_for: Nanos) -> Result<(), SimError> {
        self.end_task(task, TaskEnd::Done)?;
        let job = self.tasks[task.0 as usize].job;
        self.deliver(Event::TaskFinished {
            task,
            placement: Placement::whole(gpu),
            ran_for,
            measured: true,
            result: Ok(()),
        })?;
        let spec = &self.workload.jobs[job];
        match spec.submission {
            Submission::Window => self.submit_next(job)?,
            Submission::Burst if self.jobs[job].outstanding() == 0 => {
                for _ in 0..spec.window.max(1) {
                    self.submit_next(job)?;
                }
            }
            Submission::Burst => {}
        }
        self.maybe_job_done(job)
    }

    fn end_task(&mut self, task: TaskId, end: TaskEnd) -> Result<(), SimError> {
        let now = self.now;
        match self.tasks.get(task.0 as usize) {
            None => return Err(self.violation(format!("ended unknown {task}"))),
            Some(r) if r.end.is_some() => return Err(self.violation(format!("{task} ended twice"))),
            Some(_) => {}
        }
        let record = &mut self.tasks[task.0 as usize];
        record.end = Some((now, end));
        self.jobs[record.job].ended += 1;
        self.tasks_open -= 1;
        Ok(())
    }

    fn maybe_job_done(&mut self, job: usize) -> Result<(), SimError> {
        if self.jobs[job].ended == self.workload.jobs[job].tasks.len() {
            let tenant: TenantId = self.workload.jobs[job].tenant.id;
            self.deliver(Event::TenantLeft { tenant })?;
        }
        Ok(())
    }

    /// Tell the policy, then carry out what it answers.
    fn deliver(&mut self, event: Event) -> Result<(), SimError> {
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        self.policy.on_event(self.now, &event, &mut actions);
        for action in actions.drain(..) {
            self.apply(action)?;
        }
        self.actions = actions;
        Ok(())
    }

    fn apply(&mut self, action: Action) -> Result<(), SimError> {
        match action {
            Action::Dispatch { task, placement } => {
                let gpu = placement.gpu;
                let Some(g) = self.gpus.get(gpu.0 as usize) else {
                    return Err(self.violation(format!("dispatch to unknown {gpu}")));
                };
                let exclusive = self.opts.sharing == Sharing::Exclusive;
                if (exclusive && !g.running.is_empty()) || g.resetting {
                    return Err(self.violation(format!("{task} dispatched to busy {gpu}")));
                }
                let record = self
                    .tasks
                    .get(task.0 as usize)
                    .ok_or_else(|| self.violation(format!("dispatch of unknown {task}")))?;
                if record.end.is_some() {
                    return Err(self.violation(format!("{task} dispatched after it ended")));
                }
                if self.gpus.iter().any(|g| g.running.iter().any(|(t, _)| *t == task)) {
                    return Err(self.violation(format!("{task} dispatched while running")));
                }
                let exec = self.opts.perf.exec_time(record.work, placement);
                let now = self.now;
                self.tasks[task.0 as usize].last_start = Some(now);
                // workloads carry no launch shape yet: each task asks for the whole GPU,
                // so co-running tasks share it equally
                let demand = 1.0;
                let g = &mut self.gpus[gpu.0 as usize];
                if let Err(e) = g.model.start(now.0, task.0, exec.0, demand) {
                    return Err(self.violation(format!("{task} on {gpu}: {e}")));
                }
                g.running.push((task, now));
                self.predict_next(gpu);
            }
            Action::EndTask { task, reason } => {
                if self.gpus.iter().any(|g| g.running.iter().any(|(t, _)| *t == task)) {
                    return Err(self.violation(format!("{task} ended while running")));
                }
                let end = match reason {
                    TaskEndReason::Unschedulable(why) => TaskEnd::Failed(why),
                    other => TaskEnd::Cancelled(format!("{other:?}")),
                };
                self.end_task(task, end)?;
                let job = self.tasks[task.0 as usize].job;
                self.maybe_job_done(job)?;
            }
            Action::ResetGpu { gpu, killed } => {
                let now = self.now;
                let reset_latency = self.opts.perf.reset_latency;
                let Some(g) = self.gpus.get_mut(gpu.0 as usize) else {
                    return Err(self.violation(format!("reset of unknown {gpu}")));
                };
                if g.resetting {
                    return Err(self.violation(format!("{gpu} reset while resetting")));
                }
                let running = std::mem::take(&mut g.running);
                // a reset kills everything on the GPU; the policy names the task it
                // knows of (the only one, when exclusive)
                if running.first().map(|(t, _)| *t) != killed {
                    return Err(self
                        .violation(format!("{gpu} reset killing {killed:?} but {running:?} ran")));
                }
                for (task, started) in running {
                    // the killed task's remaining work is dropped (it is re-issued whole)
                    let _ = g.model.remove(now.0, task.0);
                    // NVSMI counts the killed task's run as busy time, as the paper measured.
                    g.busy += now - started;
                    self.tasks[task.0 as usize].kills += 1;
                }
                g.generation += 1;
                g.resetting = true;
                self.resets += 1;
                self.schedule(now + reset_latency, SimEvent::ResetEnds(gpu));
            }
            Action::SetPools { user_facing, batch } => {
                let mut all: Vec<GpuId> = user_facing.iter().chain(&batch).copied().collect();
                all.sort_unstable();
                let expected: Vec<GpuId> = self.opts.gpus.iter().map(|g| g.id).collect();
                if all != expected {
                    return Err(self.violation(format!(
                        "pools {user_facing:?} + {batch:?} do not partition the GPUs"
                    )));
                }
                self.pool_user_facing = user_facing.len();
            }
            // a typed refusal the policy hears about, never a silent drop (memory is
            // admitted by the phase engine, not this one)
            other => {
                let refusal = Event::ActionRefused {
                    action: format!("{other:?}"),
                    reason: "not modelled by this engine (exclusive GPUs, no memory book)".into(),
                };
                self.deliver(refusal)?;
            }
        }
        Ok(())
    }
}

fn ratio(weighted: u128, span: Nanos) -> f64 {
    if span.0 == 0 { 0.0 } else { weighted as f64 / span.0 as f64 }
}
