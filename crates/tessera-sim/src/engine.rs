//! The discrete-event engine: replays a [`Workload`] against a policy over the
//! [`PerfModel`], and checks the core's invariants on every action.
//!
//! Events at the same instant are processed in the order they were scheduled. When a
//! task completes, the policy hears of the completion first and the job's next task is
//! submitted after it, at the same instant: in a real node the client learns of the
//! completion before it can submit again, so a freed GPU may already have been given
//! to another tenant (this is what makes Flexy's minimum reservation matter).

use crate::metrics::{GpuMeasures, RunMetrics, TaskEnd, TaskRecord};
use crate::perf::PerfModel;
pub use crate::slot_model::Sharing;
use crate::slot_model::{Piece, SlotModel};
use crate::workload::{Submission, Workload};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use tessera_core::action::TaskEndReason;
use tessera_core::event::Event;
use tessera_core::{
    Action, GpuId, GpuSpec, Nanos, PartitionId, PerMille, Placement, Policy, TaskId, TaskSpec,
    TenantId,
};
use tessera_gpu::concurrent::KernelLaunch;
use tessera_gpu::occupancy::Launch;
use tessera_gpu::power::EnergyMeter;

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
    /// The next task of an open-loop job is submitted.
    NextArrival(usize),
    /// A job's CPU phase before its next launch ends: the task is submitted.
    CpuPhaseEnds(usize),
    // slot as u32 keeps the queue's entries at 40 bytes, as before slots existed
    TaskEnds {
        slot: u32,
        task: TaskId,
        generation: u64,
    },
    /// The block model of a slot changes state by itself (blocks end, a slice or a
    /// switch ends); some kernels may have finished.
    SlotChanges {
        slot: u32,
        generation: u64,
    },
    ResetEnds(GpuId),
    MigrationArrives(usize),
    RepartitionEnds(GpuId),
    PowerChanged {
        gpu: GpuId,
        powered: bool,
    },
    Tick,
}

/// One place work runs: a whole GPU, or one spatial partition of it. Each runs the
/// shared-GPU model of `tessera-gpu` (exclusive in Flexy's and schedGPU's
/// experiments), which decides when its pieces finish: exclusive use is the
/// one-piece case of the same model, not a second code path.
#[derive(Debug)]
struct Slot {
    placement: Placement,
    model: SlotModel,
    /// Running tasks and when each started (at most one when exclusive).
    running: Vec<(TaskId, Nanos)>,
    /// Bumped whenever the next finish is predicted again; older predictions are stale.
    generation: u64,
}

impl Slot {
    fn new(placement: Placement, sharing: Sharing, capacity: f64) -> Slot {
        Slot {
            placement,
            model: SlotModel::new(sharing, capacity),
            running: Vec::new(),
            generation: 0,
        }
    }
}

#[derive(Clone, Debug)]
struct GpuSim {
    /// The slot of the whole GPU (dispatchable while the GPU is not partitioned).
    whole: usize,
    /// The slots of its current partitions, in partition order.
    partitions: Vec<usize>,
    /// Slots that take no more work but may still run some (the old partitions after
    /// a repartition, or the whole GPU once partitioned).
    retiring: Vec<usize>,
    repartitioning: bool,
    resetting: bool,
    powered: bool,
    power_pending: bool,
    /// Migrations under way towards this GPU (it may not be reset, repartitioned or
    /// powered down meanwhile).
    incoming: usize,
    /// Tasks running on any of its slots.
    active: usize,
    active_since: Nanos,
    /// Time with at least one task running (NVSMI's busy time).
    busy_union: Nanos,
    /// Summed duration of the runs on it, killed ones included (how the Flexy paper's
    /// NVSMI figures count an exclusive GPU; equal to `busy_union` when exclusive).
    busy: Nanos,
    /// Tenants (job indices) with tasks running here, and how many.
    resident: Vec<(usize, u32)>,
    /// Their summed declared memory.
    resident_bytes: u64,
    energy: EnergyMeter,
    /// Integral of the resident tenants beyond the first, tenant-ns, up to
    /// `resident_since`.
    extra_app_ns: u128,
    resident_since: Nanos,
}

impl GpuSim {
    /// Integrate the residency up to `now`, before it changes.
    fn settle_residency(&mut self, now: Nanos) {
        let extra = self.resident.len().saturating_sub(1) as u128;
        self.extra_app_ns += extra * u128::from((now - self.resident_since).0);
        self.resident_since = now;
    }
}

/// A tenant's tasks on their way between GPUs.
#[derive(Clone, Debug)]
struct MigrationSim {
    job: usize,
    to: GpuId,
    /// (task, what it still has to run, when it started).
    tasks: Vec<(TaskId, Piece, Nanos)>,
}

/// Where a task is, as the engine knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Location {
    Waiting,
    Running(usize),
    Migrating,
    Ended,
}

#[derive(Clone, Debug, Default)]
struct JobSim {
    next_task: usize,
    ended: usize,
    /// Its streams' priority raised by the policy ([`Action::SetStreamPriority`]).
    stream_raised: bool,
}

impl JobSim {
    fn outstanding(&self) -> usize {
        self.next_task - self.ended
    }
}

/// What a raised stream adds to its tenant's priority: more than any tenant priority
/// (a `u8`), so that a raised stream outranks every stream not raised.
const RAISED_STREAM: i32 = 1 << 8;

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
    /// How a GPU's (or partition's) running tasks share it: `Exclusive` (one at a
    /// time, Flexy's testbed; a dispatch to a busy GPU is a policy violation) or a
    /// sharing mode of `tessera-gpu`, under which tasks dispatched to a busy GPU co-run.
    pub sharing: Sharing,
    /// Report per-GPU measurements (NVSMI busy and SM-weighted utilization, mean
    /// co-location, energy, migrations, repartitions) in [`RunMetrics::gpus`]. Off
    /// for the Flexy and schedGPU experiments, whose results files predate them.
    pub measure_gpus: bool,
    /// Count user-facing tasks and those that met their SLA per window of this length,
    /// by submission time ([`crate::metrics::RunMetrics::sla_windows`]).
    pub sla_window: Option<Nanos>,
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
    /// The next [`SimEvent::Tick`] (time, sequence number), kept out of `queue` and
    /// merged in its place: a policy quiet until later ([`Policy::quiet_until`]) has
    /// its ticks passed over in a stretch instead of each pushed and popped (gpu-lets'
    /// 100 µs ticks were 80% of `sim gpulets`' 564 million events: issue 55).
    tick: Option<(Nanos, u64)>,
    slots: Vec<Slot>,
    gpus: Vec<GpuSim>,
    migrations: Vec<Option<MigrationSim>>,
    /// Repartitions under way: the GPU and its new shares.
    pending_shares: Vec<(GpuId, Vec<PerMille>)>,
    /// Batched executions running: the first task, which names the execution in its
    /// slot, and every request in it.
    batches: BTreeMap<TaskId, Vec<TaskId>>,
    jobs: Vec<JobSim>,
    tasks: Vec<TaskRecord>,
    location: Vec<Location>,
    actions: Vec<Action>,
    pool_user_facing: usize,
    pool_weighted: u128,
    k_weighted: u128,
    last_sample: Nanos,
    counts: GpuCounts,
    events: u64,
    tasks_open: usize,
    /// Tasks of foreground jobs not ended yet; background jobs submit while it is > 0.
    foreground_left: usize,
    /// CPU phases under way now, and the most at once (each on a core of its own here:
    /// how many cores a run would need for that to hold).
    cpu_phases: (usize, usize),
    /// Whether to keep per-GPU tenant residency (for the memory invariant and
    /// energy): only when some tenant declares memory or measurements were asked for,
    /// so that the exclusive path pays nothing for it.
    track_residency: bool,
}

/// Counts of what the engine carried out.
#[derive(Clone, Copy, Debug, Default)]
struct GpuCounts {
    resets: u64,
    migrations: u64,
    migrations_failed: u64,
    repartitions: u64,
    power_changes: u64,
}

impl<'w> Simulation<'w> {
    /// A run of `workload` under `policy`.
    pub fn new(
        workload: &'w Workload,
        policy: Box<dyn Policy>,
        opts: SimOptions,
    ) -> Simulation<'w> {
        let slots: Vec<Slot> = opts
            .gpus
            .iter()
            .map(|g| Slot::new(Placement::whole(g.id), opts.sharing, 1.0))
            .collect();
        let gpus = (0..opts.gpus.len())
            .map(|i| GpuSim {
                whole: i,
                partitions: Vec::new(),
                retiring: Vec::new(),
                repartitioning: false,
                resetting: false,
                powered: true,
                power_pending: false,
                incoming: 0,
                active: 0,
                active_since: Nanos::ZERO,
                busy_union: Nanos::ZERO,
                busy: Nanos::ZERO,
                resident: Vec::new(),
                resident_bytes: 0,
                energy: EnergyMeter::new(opts.perf.power, 0),
                extra_app_ns: 0,
                resident_since: Nanos::ZERO,
            })
            .collect();
        Simulation {
            workload,
            policy,
            now: Nanos::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            tick: None,
            slots,
            gpus,
            migrations: Vec::new(),
            pending_shares: Vec::new(),
            batches: BTreeMap::new(),
            jobs: vec![JobSim::default(); workload.jobs.len()],
            tasks: Vec::with_capacity(workload.task_count()),
            location: Vec::with_capacity(workload.task_count()),
            actions: Vec::new(),
            pool_user_facing: 0,
            pool_weighted: 0,
            k_weighted: 0,
            last_sample: Nanos::ZERO,
            counts: GpuCounts::default(),
            events: 0,
            tasks_open: 0,
            foreground_left: workload
                .jobs
                .iter()
                .filter(|j| !j.background)
                .map(|j| j.tasks.len())
                .sum(),
            cpu_phases: (0, 0),
            track_residency: opts.measure_gpus
                || workload.jobs.iter().any(|j| j.tenant.memory.0 > 0),
            opts,
        }
    }

    fn schedule(&mut self, at: Nanos, event: SimEvent) {
        if matches!(event, SimEvent::Tick) {
            self.tick = Some((at, self.seq));
        } else {
            self.queue.push(Reverse((at, self.seq, event)));
        }
        self.seq += 1;
    }

    /// The next event in (time, sequence) order, the tick merged with the queue.
    fn pop_event(&mut self) -> Option<(Nanos, SimEvent)> {
        let tick_first = match (self.tick, self.queue.peek()) {
            (Some(t), Some(Reverse((at, seq, _)))) => t < (*at, *seq),
            (tick, _) => tick.is_some(),
        };
        if tick_first {
            self.tick.take().map(|(at, _)| (at, SimEvent::Tick))
        } else {
            self.queue.pop().map(|Reverse((at, _, e))| (at, e))
        }
    }

    /// Pass over every tick the policy said it would not act on (before its
    /// [`Policy::quiet_until`]) and that comes before the next queued event, counted as
    /// delivered ticks are: the same events, sequence numbers and queue lengths as if
    /// each had been delivered, so that nothing else in the run moves.
    fn skip_quiet_ticks(&mut self, queued_sum: &mut u64) -> Result<(), SimError> {
        // (the policy asked only when a tick is pending: this runs on every event)
        let Some((at, _)) = self.tick else { return Ok(()) };
        let Some(period) = self.policy.tick_interval() else { return Ok(()) };
        let mut until = self.policy.quiet_until();
        if let Some(Reverse((next, _, _))) = self.queue.peek() {
            until = until.min(*next);
        }
        if at >= until || period == Nanos::ZERO || !self.work_remains() {
            return Ok(());
        }
        let k = (until.0 - at.0).div_ceil(period.0);
        self.events += k;
        *queued_sum += k * (self.queue.len() as u64 + 1);
        if self.events > self.opts.event_budget {
            return Err(SimError::EventBudget(self.opts.event_budget));
        }
        self.seq += k;
        self.tick = Some((Nanos(at.0 + k * period.0), self.seq - 1));
        Ok(())
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
        for g in &mut self.gpus {
            g.energy = EnergyMeter::new(self.opts.perf.power, start.0);
        }
        if let Some(period) = self.policy.tick_interval() {
            self.schedule(start + period, SimEvent::Tick);
        }
        let mut queued_sum: u64 = 0;
        loop {
            self.skip_quiet_ticks(&mut queued_sum)?;
            let Some((at, event)) = self.pop_event() else { break };
            self.events += 1;
            queued_sum += self.queue.len() as u64 + u64::from(self.tick.is_some()) + 1;
            if self.events > self.opts.event_budget {
                return Err(SimError::EventBudget(self.opts.event_budget));
            }
            self.sample_gauges(at);
            self.now = at;
            match event {
                SimEvent::JobArrives(i) => self.job_arrives(i)?,
                SimEvent::NextArrival(i) => self.open_arrival(i)?,
                SimEvent::CpuPhaseEnds(i) => {
                    self.cpu_phases.0 -= 1;
                    self.submit_next(i)?
                }
                SimEvent::TaskEnds { slot, task, generation } => {
                    self.task_ends(slot as usize, Some(task), generation)?
                }
                SimEvent::SlotChanges { slot, generation } => {
                    self.task_ends(slot as usize, None, generation)?
                }
                SimEvent::ResetEnds(gpu) => {
                    self.gpus[gpu.0 as usize].resetting = false;
                    self.deliver(Event::GpuResetDone { gpu })?;
                }
                SimEvent::MigrationArrives(i) => self.migration_arrives(i)?,
                SimEvent::RepartitionEnds(gpu) => self.repartition_ends(gpu)?,
                SimEvent::PowerChanged { gpu, powered } => {
                    let now = self.now;
                    let g = &mut self.gpus[gpu.0 as usize];
                    g.powered = powered;
                    g.power_pending = false;
                    g.energy.set(now.0, powered, 0);
                    self.deliver(Event::GpuPowerChanged { gpu, powered })?;
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
                .filter(|(j, _)| !j.background)
                .map(|(j, s)| j.tasks.len() - s.next_task)
                .sum::<usize>();
        if unfinished > 0 {
            return Err(SimError::Stalled { policy: self.policy.label(), unfinished });
        }
        let span = self.now - start;
        let mean_queue_len = queued_sum as f64 / self.events.max(1) as f64;
        let measures = self.opts.measure_gpus.then(|| self.gpu_measures(span));
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        let host_per_job: Vec<Nanos> = self
            .workload
            .jobs
            .iter()
            .map(|j| {
                self.workload
                    .kernels
                    .get(j.kernel as usize)
                    .map_or(Nanos::ZERO, |k| k.host_per_task)
            })
            .collect();
        let tenant_of_job: Vec<TenantId> = self.workload.jobs.iter().map(|j| j.tenant.id).collect();
        Ok(RunMetrics::from_records(
            &self.tasks,
            &host_per_job,
            &tenant_of_job,
            // exclusive: the runs' own durations, as the paper's NVSMI measured; shared:
            // time with anything running (NVSMI's busy fraction; the runs overlap)
            self.gpus.iter().map(|g| if exclusive { g.busy } else { g.busy_union }).collect(),
            span,
            self.counts.resets,
            self.events,
            ratio(self.pool_weighted, span),
            ratio(self.k_weighted, span),
            self.opts.keep_latencies,
        ))
        .map(|m| RunMetrics {
            mean_queue_len,
            gpus: measures,
            sla_windows: self.opts.sla_window.map(|w| self.sla_windows(w)).unwrap_or_default(),
            ..m
        })
    }

    /// Per-GPU measurements at the end of the run (`now`), over `span`.
    fn gpu_measures(&mut self, span: Nanos) -> GpuMeasures {
        let now = self.now;
        let span_ns = span.0.max(1) as f64;
        let mut m = GpuMeasures {
            busy: Vec::new(),
            sm_weighted: Vec::new(),
            mean_running: Vec::new(),
            energy_j: Vec::new(),
            load_bands: Vec::new(),
            extra_app_s: Vec::new(),
            job_end_s: self.job_ends(),
            migrations: self.counts.migrations,
            migrations_failed: self.counts.migrations_failed,
            repartitions: self.counts.repartitions,
            power_changes: self.counts.power_changes,
            max_cpu_phases: self.cpu_phases.1,
        };
        for (i, g) in self.gpus.iter_mut().enumerate() {
            let mut sm = 0.0;
            let mut pieces = 0.0;
            for slot in self.slots.iter_mut().filter(|s| s.placement.gpu.0 as usize == i) {
                // every slot's clock is at or before the end; the usage is integrated
                let _ = slot.model.advance(now.0.max(slot.model.now()));
                let usage = slot.model.usage();
                sm += usage.sm_busy_ns;
                pieces += usage.piece_ns;
            }
            m.busy.push(g.busy_union.0 as f64 / span_ns);
            m.sm_weighted.push(sm / span_ns);
            m.mean_running.push(pieces / span_ns);
            m.energy_j.push(g.energy.joules(now.0));
            let whole = self.slots[g.whole].model.usage();
            m.load_bands.push(whole.load_ns.map(|ns| ns / span_ns));
            g.settle_residency(now);
            m.extra_app_s.push(g.extra_app_ns as f64 / 1e9);
        }
        m
    }

    /// When each job's last task ended, seconds.
    fn job_ends(&self) -> Vec<Option<f64>> {
        let mut ends: Vec<Option<Nanos>> = vec![None; self.workload.jobs.len()];
        let mut open = vec![false; self.workload.jobs.len()];
        for t in &self.tasks {
            match t.end {
                Some((e, _)) => ends[t.job] = Some(ends[t.job].map_or(e, |x| x.max(e))),
                None => open[t.job] = true,
            }
        }
        ends.iter()
            .zip(open)
            .map(|(e, o)| if o { None } else { e.map(|e| e.0 as f64 / 1e9) })
            .collect()
    }

    fn work_remains(&self) -> bool {
        self.tasks_open > 0 || self.foreground_left > 0
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
        if job.submission == Submission::Open {
            if !job.tasks.is_empty() {
                // its first request at its arrival, the next when its time comes
                self.open_arrival(i)?;
            }
        } else {
            for _ in 0..job.window.max(1) {
                if job.submission == Submission::Window {
                    self.after_cpu_phase(i)?;
                } else {
                    self.submit_next(i)?;
                }
            }
        }
        if job.tasks.is_empty() || (job.background && self.foreground_left == 0) {
            self.deliver(Event::TenantLeft { tenant: job.tenant.id })?;
        }
        Ok(())
    }

    /// Submit an open-loop job's next request and schedule the one after it.
    fn open_arrival(&mut self, i: usize) -> Result<(), SimError> {
        self.submit_next(i)?;
        let job = &self.workload.jobs[i];
        let next = self.jobs[i].next_task;
        if next < job.tasks.len() {
            let at = job.arrivals.get(next).copied().unwrap_or(self.now).max(self.now);
            self.schedule(at, SimEvent::NextArrival(i));
        }
        Ok(())
    }

    /// Submit `job`'s next task once its kernel's CPU phase has run (at once without
    /// one). The CPU phase runs on a core of its own: CPU contention is not modelled
    /// here (the program engine models it).
    fn after_cpu_phase(&mut self, job: usize) -> Result<(), SimError> {
        let spec = &self.workload.jobs[job];
        let cpu = self
            .workload
            .kernels
            .get(spec.kernel as usize)
            .map_or(Nanos::ZERO, |k| k.cpu_per_launch);
        if cpu == Nanos::ZERO {
            return self.submit_next(job);
        }
        if self.jobs[job].next_task < spec.tasks.len() {
            self.schedule(self.now + cpu, SimEvent::CpuPhaseEnds(job));
            self.cpu_phases.0 += 1;
            self.cpu_phases.1 = self.cpu_phases.1.max(self.cpu_phases.0);
        }
        Ok(())
    }

    fn submit_next(&mut self, job_index: usize) -> Result<(), SimError> {
        let job = &self.workload.jobs[job_index];
        let state = &mut self.jobs[job_index];
        if state.next_task >= job.tasks.len() || (job.background && self.foreground_left == 0) {
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
            first_start: None,
            last_start: None,
            kills: 0,
            end: None,
        });
        self.location.push(Location::Waiting);
        self.tasks_open += 1;
        let spec = TaskSpec {
            launch: self.workload.kernels.get(job.kernel as usize).and_then(|k| k.launch),
            batch: 1,
            id,
            tenant: job.tenant.id,
            kernel: job.kernel,
            memory: tessera_core::Bytes(0),
        };
        self.deliver(Event::TaskSubmitted(spec))
    }

    /// The model of `slot` said `task` (fluid model) or something (block model) ends
    /// now: every kernel finished by now ends.
    fn task_ends(
        &mut self,
        slot: usize,
        task: Option<TaskId>,
        generation: u64,
    ) -> Result<(), SimError> {
        if self.slots[slot].generation != generation {
            // killed by a reset or a migration, or (sharing) superseded by a later
            // prediction
            return Ok(());
        }
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        let gpu = self.slots[slot].placement.gpu;
        // every piece due now, one at a time (no allocation on this hot path); several
        // may end at one instant when shared, taken in the model's order
        let mut ended = 0;
        loop {
            let s = &mut self.slots[slot];
            let id = match s.model.pop_finished(self.now.0) {
                Ok(Some(id)) => id,
                Ok(None) => break,
                Err(e) => return Err(self.violation(format!("{gpu}: {e}"))),
            };
            if exclusive && (task.is_some_and(|t| t.0 != id) || !s.model.is_empty()) {
                return Err(self.violation(format!(
                    "{task:?} ended on {gpu} but the GPU model finished task {id}"
                )));
            }
            let finished = TaskId(id);
            let Some(i) = s.running.iter().position(|(t, _)| *t == finished) else {
                return Err(
                    self.violation(format!("{finished} finished on {gpu} but was not running"))
                );
            };
            let (_, started) = s.running.swap_remove(i);
            let placement = s.placement;
            let ran_for = self.now - started;
            let kernel_time = self.kernel_time(finished, ran_for);
            self.gpus[gpu.0 as usize].busy += kernel_time;
            ended += 1;
            let batch = if self.batches.is_empty() { None } else { self.batches.remove(&finished) };
            match batch {
                // every request of a batch completes with its execution
                Some(members) => {
                    for m in &members {
                        self.left_gpu(gpu, *m);
                    }
                    for m in members {
                        self.task_done(placement, m, ran_for)?;
                    }
                }
                None => {
                    self.left_gpu(gpu, finished);
                    self.task_done(placement, finished, ran_for)?;
                }
            }
        }
        if ended == 0
            && let Some(task) = task
        {
            return Err(
                self.violation(format!("{task} ended on {gpu} but the GPU model had nothing due"))
            );
        }
        if !exclusive {
            // The event is handled: nothing touches the slot before the next queued
            // event, so the block model's changes before then that finish nothing run
            // here rather than as events of their own (each would be popped, end
            // nothing and be predicted again).
            let horizon = self.next_event_at();
            if let Err(e) = self.slots[slot].model.run_until_a_finish(horizon.0) {
                return Err(self.violation(format!("{gpu}: {e}")));
            }
            // the remaining tasks' finishes moved: predict again
            self.predict_next(slot);
        }
        Ok(())
    }

    /// When the earliest event waiting is due (queued or the tick; stale predictions
    /// count, which only brings it earlier).
    fn next_event_at(&self) -> Nanos {
        let queued = self.queue.peek().map_or(Nanos(u64::MAX), |Reverse((at, _, _))| *at);
        self.tick.map_or(queued, |(at, _)| queued.min(at))
    }

    /// Of `ran` on a GPU by the execution led by `task`, the time its kernel ran: its
    /// kernel's host part ([`crate::workload::Kernel::host_per_task`]) comes first and
    /// is not busy time by NVSMI's reading.
    fn kernel_time(&self, task: TaskId, ran: Nanos) -> Nanos {
        let job = self.tasks[task.0 as usize].job;
        let kernel = self.workload.jobs[job].kernel as usize;
        let host = self.workload.kernels.get(kernel).map_or(Nanos::ZERO, |k| k.host_per_task);
        ran - host
    }

    /// Schedule the next finish in `slot` from its model, superseding any earlier
    /// prediction.
    fn predict_next(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.generation += 1;
        let generation = s.generation;
        let slot = slot as u32;
        match s.model.next_wake() {
            Some((at, Some(id))) => {
                self.schedule(Nanos(at), SimEvent::TaskEnds { slot, task: TaskId(id), generation })
            }
            Some((at, None)) => {
                self.schedule(Nanos(at), SimEvent::SlotChanges { slot, generation })
            }
            None => {}
        }
    }

    /// `task` started running on `gpu`: its books (residency, busy time, energy).
    #[inline]
    fn joined_gpu(&mut self, gpu: GpuId, task: TaskId, slot: usize) {
        let now = self.now;
        let job = self.tasks[task.0 as usize].job;
        let bytes = self.workload.jobs[job].tenant.memory.0;
        let metered = self.opts.measure_gpus;
        self.location[task.0 as usize] = Location::Running(slot);
        let g = &mut self.gpus[gpu.0 as usize];
        if g.active == 0 {
            g.active_since = now;
        }
        g.active += 1;
        if !self.track_residency {
            return;
        }
        match g.resident.iter_mut().find(|(j, _)| *j == job) {
            Some((_, n)) => *n += 1,
            None => {
                g.settle_residency(now);
                g.resident.push((job, 1));
                g.resident_bytes += bytes;
                if metered {
                    g.energy.set(now.0, g.powered, g.resident.len());
                }
            }
        }
    }

    /// `task` stopped running on `gpu` (finished, killed or moving away).
    #[inline]
    fn left_gpu(&mut self, gpu: GpuId, task: TaskId) {
        let now = self.now;
        let job = self.tasks[task.0 as usize].job;
        let bytes = self.workload.jobs[job].tenant.memory.0;
        let metered = self.opts.measure_gpus;
        self.location[task.0 as usize] = Location::Waiting;
        let g = &mut self.gpus[gpu.0 as usize];
        g.active -= 1;
        if g.active == 0 {
            g.busy_union += now - g.active_since;
        }
        if !self.track_residency {
            return;
        }
        if let Some(i) = g.resident.iter().position(|(j, _)| *j == job) {
            g.resident[i].1 -= 1;
            if g.resident[i].1 == 0 {
                g.settle_residency(now);
                g.resident.swap_remove(i);
                g.resident_bytes -= bytes;
                if metered {
                    g.energy.set(now.0, g.powered, g.resident.len());
                }
            }
        }
    }

    /// Declared memory of the tenants resident on `gpu`, plus `extra_job`'s if it is
    /// not resident yet.
    fn resident_memory(&self, gpu: GpuId, extra_job: usize) -> u64 {
        let g = &self.gpus[gpu.0 as usize];
        let extra = self.workload.jobs[extra_job].tenant.memory.0;
        if extra == 0 || g.resident.iter().any(|(j, _)| *j == extra_job) {
            g.resident_bytes
        } else {
            g.resident_bytes + extra
        }
    }

    fn task_done(
        &mut self,
        placement: Placement,
        task: TaskId,
        ran_for: Nanos,
    ) -> Result<(), SimError> {
        self.end_task(task, TaskEnd::Done)?;
        let job = self.tasks[task.0 as usize].job;
        self.deliver(Event::TaskFinished {
            task,
            placement,
            ran_for,
            measured: true,
            result: Ok(()),
        })?;
        let spec = &self.workload.jobs[job];
        match spec.submission {
            Submission::Window => self.after_cpu_phase(job)?,
            Submission::Burst if self.jobs[job].outstanding() == 0 => {
                for _ in 0..spec.window.max(1) {
                    self.submit_next(job)?;
                }
            }
            Submission::Burst | Submission::Open => {}
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
        self.location[task.0 as usize] = Location::Ended;
        self.jobs[record.job].ended += 1;
        if !self.workload.jobs[record.job].background {
            self.foreground_left -= 1;
        }
        self.tasks_open -= 1;
        Ok(())
    }

    fn maybe_job_done(&mut self, job: usize) -> Result<(), SimError> {
        let spec = &self.workload.jobs[job];
        let state = &self.jobs[job];
        let background_over =
            spec.background && self.foreground_left == 0 && state.outstanding() == 0;
        if state.ended == spec.tasks.len() || background_over {
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

    fn gpu(&self, gpu: GpuId, what: &str) -> Result<&GpuSim, SimError> {
        self.gpus
            .get(gpu.0 as usize)
            .ok_or_else(|| self.violation(format!("{what} on unknown {gpu}")))
    }

    fn apply(&mut self, action: Action) -> Result<(), SimError> {
        match action {
            Action::Dispatch { task, placement } => self.dispatch(&[task], placement)?,
            Action::DispatchBatch { tasks, placement } => self.dispatch(&tasks, placement)?,
            Action::EndTask { task, reason } => {
                if matches!(
                    self.location.get(task.0 as usize),
                    Some(Location::Running(_) | Location::Migrating)
                ) {
                    return Err(self.violation(format!("{task} ended while running")));
                }
                let end = match reason {
                    TaskEndReason::Unschedulable(why) => TaskEnd::Failed(why),
                    TaskEndReason::Dropped => TaskEnd::Dropped,
                    other => TaskEnd::Cancelled(format!("{other:?}")),
                };
                self.end_task(task, end)?;
                let job = self.tasks[task.0 as usize].job;
                self.maybe_job_done(job)?;
            }
            Action::ResetGpu { gpu, killed } => self.reset(gpu, killed)?,
            Action::SetPools { user_facing } => {
                let gpus = self.opts.gpus.len();
                if user_facing.windows(2).any(|w| w[0] >= w[1])
                    || user_facing.last().is_some_and(|g| g.0 as usize >= gpus)
                {
                    return Err(self.violation(format!(
                        "user-facing pool {user_facing:?} is not a set of this node's GPUs in order"
                    )));
                }
                self.pool_user_facing = user_facing.len();
            }
            Action::Migrate { tenant, from, to } => self.migrate(tenant, from, to)?,
            Action::Repartition { gpu, shares } => self.repartition(gpu, shares)?,
            Action::SetGpuPowered { gpu, powered } => self.set_powered(gpu, powered)?,
            Action::SetStreamPriority { tenant, raised }
                if matches!(self.opts.sharing, Sharing::Blocks { .. }) =>
            {
                let Some(job) = self.workload.jobs.iter().position(|j| j.tenant.id == tenant)
                else {
                    return Err(self.violation(format!("stream priority of unknown {tenant}")));
                };
                // kernels already launched keep theirs, as streams re-created in CUDA do
                self.jobs[job].stream_raised = raised;
            }
            // a typed refusal the policy hears about, never a silent drop: memory is
            // admitted by the phase engine
            other => {
                let refusal = Event::ActionRefused {
                    action: Box::new(other),
                    reason: "not modelled by this engine (memory is admitted by the phase engine, \
                             stream priorities exist in the block model only)"
                        .into(),
                };
                self.deliver(refusal)?;
            }
        }
        Ok(())
    }

    /// Start one execution at `placement`: a task alone, or a batch of requests
    /// (`tasks[0]` names the execution; all must be one tenant's).
    fn dispatch(&mut self, tasks: &[TaskId], placement: Placement) -> Result<(), SimError> {
        let gpu = placement.gpu;
        let Some(&task) = tasks.first() else {
            return Err(self.violation(format!("an empty batch dispatched to {gpu}")));
        };
        let g = self.gpu(gpu, "dispatch")?;
        if g.resetting {
            return Err(self.violation(format!("{task} dispatched to busy {gpu}")));
        }
        if !g.powered || g.power_pending {
            return Err(self.violation(format!("{task} dispatched to powered-down {gpu}")));
        }
        let slot = match placement.partition {
            None if g.partitions.is_empty() => g.whole,
            None => {
                return Err(
                    self.violation(format!("{task} dispatched to the whole of partitioned {gpu}"))
                );
            }
            Some(p) => *g.partitions.get(p.0 as usize).ok_or_else(|| {
                self.violation(format!("{task} dispatched to missing partition {p} of {gpu}"))
            })?,
        };
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        if exclusive && !self.slots[slot].running.is_empty() {
            return Err(self.violation(format!("{task} dispatched to busy {gpu}")));
        }
        let job = match self.tasks.get(task.0 as usize) {
            Some(r) => r.job,
            None => return Err(self.violation(format!("dispatch of unknown {task}"))),
        };
        let mut work = Nanos::ZERO;
        for (i, t) in tasks.iter().enumerate() {
            match self.location.get(t.0 as usize) {
                None => return Err(self.violation(format!("dispatch of unknown {t}"))),
                Some(Location::Ended) => {
                    return Err(self.violation(format!("{t} dispatched after it ended")));
                }
                Some(Location::Running(_) | Location::Migrating) => {
                    return Err(self.violation(format!("{t} dispatched while running")));
                }
                Some(Location::Waiting) if tasks[..i].contains(t) => {
                    return Err(self.violation(format!("{t} twice in one batch")));
                }
                Some(Location::Waiting) => {}
            }
            let record = &self.tasks[t.0 as usize];
            if record.job != job {
                return Err(self.violation(format!("a batch on {gpu} mixes tenants' requests")));
            }
            work += record.work;
        }
        let resident = if self.track_residency { self.resident_memory(gpu, job) } else { 0 };
        if resident > self.opts.gpus[gpu.0 as usize].memory.0 {
            return Err(self.violation(format!(
                "{task} on {gpu}: resident tenants would declare {resident} bytes, above its memory"
            )));
        }
        let piece = self.piece(task, tasks.len(), slot, job, work, placement)?;
        let now = self.now;
        let s = &mut self.slots[slot];
        if let Err(e) = s.model.start(now.0, task.0, piece) {
            return Err(self.violation(format!("{task} on {gpu}: {e}")));
        }
        s.running.push((task, now));
        if tasks.len() > 1 {
            self.batches.insert(task, tasks.to_vec());
        }
        for t in tasks {
            let record = &mut self.tasks[t.0 as usize];
            record.first_start.get_or_insert(now);
            record.last_start = Some(now);
            self.joined_gpu(gpu, *t, slot);
        }
        self.predict_next(slot);
        Ok(())
    }

    /// How the execution `lead` of `count` requests of `job` with `work` in all runs in
    /// `slot`: its time alone there, its demand and (block model) its launch.
    fn piece(
        &self,
        lead: TaskId,
        count: usize,
        slot: usize,
        job: usize,
        work: Nanos,
        placement: Placement,
    ) -> Result<Piece, SimError> {
        let gpu = placement.gpu;
        let kernel = self.workload.jobs[job].kernel;
        let (exec, demand) = match self.opts.perf.profiles.get(&kernel) {
            // a profiled kernel: its measured latency at the partition's size, times the
            // interference of what runs beside it; it fills its partition
            Some(profile) => {
                let capacity = self.slots[slot].model.capacity();
                let percent = (capacity * 100.0).round() as u32;
                let Some((batch, latency)) = profile.batch_latency(count as u32, percent) else {
                    return Err(self.violation(format!(
                        "no profile of kernel {kernel} for a batch of {} at {percent}%",
                        count
                    )));
                };
                let factor = self.neighbour_factor(gpu, slot, kernel, profile, batch, percent);
                let spread =
                    self.opts.perf.world.as_ref().map_or(1.0, |w| w.spread(kernel, lead.0));
                let ns = (latency.0 as f64 * factor * spread / self.opts.perf.speed).round() as u64;
                (Nanos(ns.max(1)), capacity)
            }
            // a batch costs the sum of its requests' work; workloads rarely carry a
            // launch shape, so each task asks for the whole GPU unless its kernel declares a
            // demand (DCUDA's applications), and co-running tasks share it
            None => {
                let demand = self.workload.kernels.get(kernel as usize).and_then(|k| k.launch);
                let demand =
                    demand.map_or(1.0, |l| (f64::from(l.demand.0) / 1000.0).clamp(1e-3, 1.0));
                (self.opts.perf.exec_time(work, placement), demand)
            }
        };
        let launch = if matches!(self.opts.sharing, Sharing::Blocks { .. }) {
            self.kernel_launch(job)
        } else {
            None
        };
        Ok(Piece { work: exec.0, demand, launch })
    }

    /// The launch of `job`'s kernel for the block model: its grid, block and
    /// registers, the job as its context, the tenant's priority as its stream's (above
    /// every tenant's own when the policy raised it).
    fn kernel_launch(&self, job: usize) -> Option<KernelLaunch> {
        let j = &self.workload.jobs[job];
        let k = self.workload.kernels.get(j.kernel as usize)?;
        let l = k.launch?;
        Some(KernelLaunch {
            context: job as u32,
            launch: Launch {
                grid_blocks: l.grid_blocks,
                threads_per_block: l.threads_per_block,
                registers_per_thread: k.registers_per_thread,
                shared_per_block: 0,
            },
            alone_ns: 0,
            priority: i32::from(j.tenant.priority)
                + if self.jobs[job].stream_raised { RAISED_STREAM } else { 0 },
        })
    }

    /// The interference factor for a batch of a profiled kernel starting in `slot` of
    /// `gpu`, from what runs in the GPU's other slots (gpu-lets §4.4; 1 without
    /// coefficients or neighbours).
    fn neighbour_factor(
        &self,
        gpu: GpuId,
        slot: usize,
        kernel: u32,
        profile: &crate::perf::KernelProfile,
        batch: u32,
        percent: u32,
    ) -> f64 {
        let (fit, world) = (self.opts.perf.interference, self.opts.perf.world.as_deref());
        if fit.is_none() && world.is_none() {
            return 1.0;
        }
        let own = profile.utilization.get(&(batch, percent)).copied();
        self.gpu_slots(gpu)
            .into_iter()
            .filter(|s| *s != slot)
            .filter_map(|s| {
                let (lead, _) = self.slots[s].running.first()?;
                let job = self.tasks[lead.0 as usize].job;
                let other_kernel = self.workload.jobs[job].kernel;
                let other = self.opts.perf.profiles.get(&other_kernel)?;
                let p = (self.slots[s].model.capacity() * 100.0).round() as u32;
                let b = self.members(*lead).len() as u32;
                let (ob, _) = other.batch_latency(b, p)?;
                // the measured slowdown where the pair was measured, else the fit's
                if let Some(f) =
                    world.and_then(|w| w.factor(kernel, batch, percent, other_kernel, ob))
                {
                    return Some(f);
                }
                Some(fit?.factor(own?, other.utilization.get(&(ob, p)).copied()?))
            })
            .fold(1.0, f64::max)
    }

    /// The tasks of the execution `lead` names: itself alone, or its batch.
    fn members(&self, lead: TaskId) -> Vec<TaskId> {
        self.batches.get(&lead).cloned().unwrap_or_else(|| vec![lead])
    }

    /// The slots of `gpu` that may run work: its whole slot, partitions and retiring ones.
    fn gpu_slots(&self, gpu: GpuId) -> Vec<usize> {
        let g = &self.gpus[gpu.0 as usize];
        let mut slots: Vec<usize> = std::iter::once(g.whole)
            .chain(g.partitions.iter().copied())
            .chain(g.retiring.iter().copied())
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    fn reset(&mut self, gpu: GpuId, mut killed: Vec<TaskId>) -> Result<(), SimError> {
        let now = self.now;
        let reset_latency = self.opts.perf.reset_latency;
        let g = self.gpu(gpu, "reset")?;
        if g.resetting {
            return Err(self.violation(format!("{gpu} reset while resetting")));
        }
        if g.incoming > 0 || !g.powered || g.power_pending || g.repartitioning {
            return Err(self.violation(format!(
                "{gpu} reset while migrating in, powered down or repartitioning"
            )));
        }
        // a reset kills everything on the GPU; the policy must name all of it
        let slots = self.gpu_slots(gpu);
        let mut running: Vec<TaskId> = slots
            .iter()
            .flat_map(|s| self.slots[*s].running.iter().flat_map(|(t, _)| self.members(*t)))
            .collect();
        running.sort_unstable();
        killed.sort_unstable();
        if running != killed {
            return Err(
                self.violation(format!("{gpu} reset killing {killed:?} but {running:?} ran"))
            );
        }
        for slot in slots {
            let runs = std::mem::take(&mut self.slots[slot].running);
            for (lead, started) in runs {
                // the killed execution's remaining work is dropped (it is re-issued whole)
                let _ = self.slots[slot].model.remove(now.0, lead.0);
                // NVSMI counts the killed task's run as busy time, as the paper measured.
                let kernel_time = self.kernel_time(lead, now - started);
                self.gpus[gpu.0 as usize].busy += kernel_time;
                for task in self.members(lead) {
                    self.tasks[task.0 as usize].kills += 1;
                    self.left_gpu(gpu, task);
                }
                self.batches.remove(&lead);
            }
            self.slots[slot].generation += 1;
        }
        self.gpus[gpu.0 as usize].resetting = true;
        self.counts.resets += 1;
        self.schedule(now + reset_latency, SimEvent::ResetEnds(gpu));
        Ok(())
    }

    /// Move a tenant's running tasks from `from` to `to`: they stop progressing, their
    /// remaining work is carried over exactly, and they resume on `to` after the
    /// migration's pause and the copy of the tenant's declared memory.
    fn migrate(&mut self, tenant: TenantId, from: GpuId, to: GpuId) -> Result<(), SimError> {
        let now = self.now;
        self.gpu(from, "migration")?;
        let target = self.gpu(to, "migration")?;
        if from == to || target.resetting || !target.powered || target.power_pending {
            return Err(self.violation(format!("migration of {tenant} to unavailable {to}")));
        }
        if !target.partitions.is_empty() || target.repartitioning {
            return Err(self.violation(format!("migration of {tenant} to partitioned {to}")));
        }
        let Some(job) = self.workload.jobs.iter().position(|j| j.tenant.id == tenant) else {
            return Err(self.violation(format!("migration of unknown {tenant}")));
        };
        if self.resident_memory(to, job) > self.opts.gpus[to.0 as usize].memory.0 {
            self.counts.migrations_failed += 1;
            return self.deliver(Event::MigrationFailed {
                tenant,
                reason: format!("{to} has no room for the tenant's declared memory"),
            });
        }
        let mut moving = Vec::new();
        for slot in self.gpu_slots(from) {
            let ids: Vec<(TaskId, Nanos)> = self.slots[slot]
                .running
                .iter()
                .filter(|(t, _)| self.tasks[t.0 as usize].job == job)
                .copied()
                .collect();
            if ids.is_empty() {
                continue;
            }
            for (task, started) in ids {
                let members = self.members(task);
                let work =
                    members.iter().fold(Nanos::ZERO, |w, m| w + self.tasks[m.0 as usize].work);
                let whole =
                    self.piece(task, members.len(), slot, job, work, self.slots[slot].placement)?;
                let left = self.slots[slot]
                    .model
                    .remove(now.0, task.0)
                    .map_err(|e| self.violation(format!("{task} leaving {from}: {e}")))?;
                // it keeps its demand; under the block model, the blocks it has left
                let launch = whole.launch.map(|mut l| {
                    let share = left as f64 / whole.work.max(1) as f64;
                    l.launch.grid_blocks =
                        ((l.launch.grid_blocks as f64 * share).ceil() as u64).max(1);
                    l
                });
                let left = Piece { work: left.max(1), demand: whole.demand, launch };
                self.slots[slot].running.retain(|(t, _)| *t != task);
                let kernel_time = self.kernel_time(task, now - started);
                self.gpus[from.0 as usize].busy += kernel_time;
                for member in self.members(task) {
                    self.left_gpu(from, member);
                    self.location[member.0 as usize] = Location::Migrating;
                }
                moving.push((task, left, started));
            }
            self.predict_next(slot);
        }
        let bytes = self.workload.jobs[job].tenant.memory.0;
        let arrive = now + Nanos(self.opts.perf.migration.duration(bytes));
        self.gpus[to.0 as usize].incoming += 1;
        self.counts.migrations += 1;
        self.migrations.push(Some(MigrationSim { job, to, tasks: moving }));
        self.schedule(arrive, SimEvent::MigrationArrives(self.migrations.len() - 1));
        Ok(())
    }

    fn migration_arrives(&mut self, i: usize) -> Result<(), SimError> {
        let Some(m) = self.migrations[i].take() else { return Ok(()) };
        let now = self.now;
        let to = m.to;
        self.gpus[to.0 as usize].incoming -= 1;
        let slot = self.gpus[to.0 as usize].whole;
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        for (task, piece, _) in m.tasks {
            if exclusive && !self.slots[slot].running.is_empty() {
                return Err(self.violation(format!("{task} migrated onto busy {to}")));
            }
            self.slots[slot]
                .model
                .start(now.0, task.0, piece)
                .map_err(|e| self.violation(format!("{task} arriving on {to}: {e}")))?;
            // its time on the GPU counts from its arrival (`ran_for` is the run here)
            self.slots[slot].running.push((task, now));
            for member in self.members(task) {
                self.joined_gpu(to, member, slot);
            }
        }
        self.predict_next(slot);
        let tenant = self.workload.jobs[m.job].tenant.id;
        self.deliver(Event::MigrationDone { tenant, to })
    }

    /// User-facing tasks done, and those that met their SLA, per `window` of
    /// submission time.
    fn sla_windows(&self, window: Nanos) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for t in &self.tasks {
            let (tessera_core::ServiceClass::UserFacing { sla }, Some((end, TaskEnd::Done))) =
                (t.class, &t.end)
            else {
                continue;
            };
            let w = (t.submitted.0 / window.0.max(1)) as usize;
            if out.len() <= w {
                out.resize(w + 1, (0, 0));
            }
            out[w].0 += 1;
            out[w].1 += u64::from(*end - t.submitted <= sla);
        }
        out
    }

    fn repartition(&mut self, gpu: GpuId, shares: Vec<PerMille>) -> Result<(), SimError> {
        let g = self.gpu(gpu, "repartition")?;
        let sum: u32 = shares.iter().map(|s| u32::from(s.0)).sum();
        if sum > 1000 || shares.iter().any(|s| s.0 == 0) {
            return Err(
                self.violation(format!("{gpu} partitions {shares:?} sum to {sum} per mille"))
            );
        }
        if g.repartitioning || g.resetting || !g.powered || g.power_pending || g.incoming > 0 {
            return Err(
                self.violation(format!("{gpu} repartitioned while busy with another change"))
            );
        }
        self.gpus[gpu.0 as usize].repartitioning = true;
        self.counts.repartitions += 1;
        let at = self.now + self.opts.perf.repartition_latency;
        self.pending_shares.push((gpu, shares));
        self.schedule(at, SimEvent::RepartitionEnds(gpu));
        Ok(())
    }

    fn repartition_ends(&mut self, gpu: GpuId) -> Result<(), SimError> {
        let Some(i) = self.pending_shares.iter().position(|(g, _)| *g == gpu) else {
            return Ok(());
        };
        let (_, shares) = self.pending_shares.swap_remove(i);
        let sharing = self.opts.sharing;
        let g = &mut self.gpus[gpu.0 as usize];
        g.repartitioning = false;
        // the old partitions (or the whole GPU) finish what they run, and take nothing new
        let old: Vec<usize> =
            if g.partitions.is_empty() { vec![g.whole] } else { std::mem::take(&mut g.partitions) };
        g.retiring.retain(|s| !old.contains(s));
        g.retiring.extend(old);
        if shares.is_empty() {
            let whole = g.whole;
            g.retiring.retain(|s| *s != whole);
        }
        for (p, share) in shares.iter().enumerate() {
            let placement = Placement { gpu, partition: Some(PartitionId(p as u32)) };
            self.slots.push(Slot::new(placement, sharing, f64::from(share.0) / 1000.0));
            let id = self.slots.len() - 1;
            self.gpus[gpu.0 as usize].partitions.push(id);
        }
        let slots = &self.slots;
        self.gpus[gpu.0 as usize].retiring.retain(|s| !slots[*s].running.is_empty());
        self.deliver(Event::RepartitionDone { gpu })
    }

    fn set_powered(&mut self, gpu: GpuId, powered: bool) -> Result<(), SimError> {
        let now = self.now;
        let g = self.gpu(gpu, "power change")?;
        if g.power_pending || g.powered == powered {
            return Err(self.violation(format!(
                "{gpu} power change to {powered} while already so or changing"
            )));
        }
        if !powered && (g.active > 0 || g.resetting || g.incoming > 0 || g.repartitioning) {
            return Err(self.violation(format!("{gpu} powered down while in use")));
        }
        let g = &mut self.gpus[gpu.0 as usize];
        g.power_pending = true;
        if !powered {
            // it stops drawing at once; powering up draws from the acknowledgement
            g.powered = false;
            g.energy.set(now.0, false, 0);
        }
        self.counts.power_changes += 1;
        self.schedule(now + self.opts.perf.power_latency, SimEvent::PowerChanged { gpu, powered });
        Ok(())
    }
}

fn ratio(weighted: u128, span: Nanos) -> f64 {
    if span.0 == 0 { 0.0 } else { weighted as f64 / span.0 as f64 }
}
