//! The discrete-event engine: replays a [`Workload`] against a policy over the
//! [`PerfModel`], and checks the core's invariants on every action.
//!
//! Events at the same instant are processed in the order they were scheduled. When a
//! task completes, the policy hears of the completion first and the job's next task is
//! submitted after it, at the same instant: in a real node the client learns of the
//! completion before it can submit again, so a freed GPU may already have been given
//! to another tenant (this is what makes Flexy's minimum reservation matter).
//!
//! Functions on every task's path (here, in `engine/` and in the models they call) are
//! inlined by force (`#[inline(always)]`): the calls themselves, their frames and
//! argument moves, were about a sixth of a task's cost (issue 55: RoundRobin 2,162 ->
//! 1,774 instructions per task with the board's likewise).

mod actions;
mod jobs;
mod measures;
mod queue;

use crate::gpu_meter::GpuMeter;
use crate::metrics::{GpuMeasures, RunMetrics, TaskEnd, TaskRecord};
use crate::perf::PerfModel;
pub use crate::slot_model::Sharing;
use crate::slot_model::{Piece, RAISED_STREAM, SlotModel};
use crate::workload::{Submission, Workload};
use queue::EventQueue;
use std::collections::BTreeMap;
use tessera_core::action::TaskEndReason;
use tessera_core::event::Event;
use tessera_core::{
    Action, GpuId, GpuSpec, Nanos, PartitionId, PerMille, Placement, Policy, ServiceClass, TaskId,
    TaskSpec, TenantId,
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
    /// The workload holds more than a run can: more than 2^32 tasks in all or in one
    /// job (a queued event and a job's counts hold them in 32 bits).
    #[error("the workload is larger than a run holds: {0}")]
    TooLarge(String),
}

/// What the engine's steps return: the error boxed, so that a step's result is one
/// word returned in a register rather than a `SimError` written through memory by
/// every step of every task (issue 55).
type Fallible<T = ()> = Result<T, Box<SimError>>;

/// What happens at a queued time. Every field is 32 bits, so that an event is 16 bytes
/// and a queue entry 32 (with its time and sequence number): the queue's pushes and
/// pops move whole entries, two per task (issue 55; they were 40 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SimEvent {
    JobArrives(u32),
    /// The next task of an open-loop job is submitted.
    NextArrival(u32),
    /// A job's CPU phase before its next launch ends: the task is submitted.
    CpuPhaseEnds(u32),
    /// The task predicted to end first on a slot ends (if the prediction is current).
    TaskEnds {
        slot: u32,
        /// The task's index ([`Simulation::task_index`]).
        task: u32,
        generation: u32,
    },
    /// The block model of a slot changes state by itself (blocks end, a slice or a
    /// switch ends); some kernels may have finished.
    SlotChanges {
        slot: u32,
        generation: u32,
    },
    ResetEnds(GpuId),
    MigrationArrives(u32),
    RepartitionEnds(GpuId),
    PowerChanged {
        gpu: GpuId,
        powered: bool,
    },
    Tick,
}

const _: () = assert!(std::mem::size_of::<SimEvent>() == 16);

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
    /// Bumped whenever the next finish is predicted again; older predictions are stale
    /// (wrapping: a prediction 2^32 predictions old is long gone from the queue).
    generation: u32,
}

impl Slot {
    /// `measured`: the run reports per-GPU measurements, which read the model's usage.
    fn new(placement: Placement, sharing: Sharing, capacity: f64, measured: bool) -> Slot {
        Slot {
            placement,
            model: SlotModel::new(sharing, capacity, measured),
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
    /// Time with at least one task running (NVSMI's busy time) and the tenants
    /// resident beyond the first (the meter the program engine's placed GPUs keep too).
    meter: GpuMeter,
    /// Summed duration of the runs on it, killed ones included (how the Flexy paper's
    /// NVSMI figures count an exclusive GPU; equal to `busy_union` when exclusive).
    busy: Nanos,
    /// Their summed declared memory.
    resident_bytes: u64,
    energy: EnergyMeter,
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
    Running,
    Migrating,
    Ended,
}

/// The engine's state of a task: its record, where it is, and its job's demand, read
/// at its dispatch. One cache line: at 100x the bench's node a task's dispatch comes
/// long after anything else of its job was touched, and each line it read there (its
/// record, its place in a table of locations, its job's demand) was a miss (issue 55).
#[derive(Clone, Debug)]
#[repr(align(64))]
struct TaskState {
    record: TaskRecord,
    /// Its job's kernel's demand on the fluid and exclusive models ([`JobSim`]'s).
    demand: f64,
    location: Location,
}

const _: () = assert!(std::mem::size_of::<TaskState>() == 64);

/// How many of a job's tasks' work [`JobSim`] reads at a time: a cache line's.
const AHEAD: usize = 8;

/// A job in the run: its progress, and what every task of it reads of the job and its
/// kernel, copied here once (issue 55: each was a walk from the workload's job to its
/// kernel, several per task). Laid out by hand: what a task's end and its job's next
/// submission read in the first cache line, the work of its next tasks in the second,
/// the rest after them. At 100x the bench's node a job is touched once a round of
/// every tenant, so each line a task's end read of it was a miss; the two lines are
/// one aligned pair, which the processor's adjacent-line prefetch fetches together.
#[derive(Clone, Debug)]
#[repr(C, align(128))]
struct JobSim {
    next_task: u32,
    ended: u32,
    /// Its tasks.
    tasks: u32,
    /// Its tenant and its kernel, what each submission reads of the workload's job
    /// besides the task's work (issue 55: at 100x the node, the workload's jobs
    /// outgrow the caches and each read of one was a miss).
    kernel: u32,
    tenant: TenantId,
    submission: Submission,
    background: bool,
    /// Whether its kernel declares a launch ([`JobSim::launch`]); held apart from it
    /// so that the first line has room (an option of it is 8 bytes more).
    has_launch: bool,
    /// Its kernel's host part per task ([`crate::workload::Kernel::host_per_task`]).
    host: Nanos,
    /// Its kernel's CPU phase before each launch.
    cpu: Nanos,
    /// Its kernel's launch as a task declares it, if `has_launch`.
    launch_info: tessera_core::LaunchInfo,
    /// The work of its tasks from `next_task` rounded down to a multiple of
    /// [`AHEAD`], read from the workload that many at a time (issue 55: at 100x the
    /// node, a job's list of tasks left the caches between two of its submissions,
    /// and reading each task's work there was a miss, a tenth of the run's time).
    ahead: [Nanos; AHEAD],
    /// Its streams' priority raised by the policy ([`Action::SetStreamPriority`]).
    stream_raised: bool,
    /// Whether its kernel has a measured profile (the profiled path of
    /// [`Simulation::piece`]).
    profiled: bool,
    /// Its tenant's declared memory, bytes.
    memory: u64,
    /// Its tenant's class, which its tasks' records leave out.
    class: ServiceClass,
}

// what a task's end and its job's next submission read: the first line, and the second
const _: () = assert!(std::mem::offset_of!(JobSim, ahead) == 64);

impl JobSim {
    fn new(job: &crate::workload::Job, workload: &Workload, perf: &PerfModel) -> JobSim {
        let kernel = workload.kernels.get(job.kernel as usize);
        let launch = kernel.and_then(|k| k.launch);
        JobSim {
            next_task: 0,
            ahead: [Nanos::ZERO; AHEAD],
            ended: 0,
            stream_raised: false,
            // (a job of more is refused when the run starts: `Simulation::run_boxed`)
            tasks: u32::try_from(job.tasks.len()).unwrap_or(u32::MAX),
            submission: job.submission,
            background: job.background,
            memory: job.tenant.memory.0,
            host: kernel.map_or(Nanos::ZERO, |k| k.host_per_task),
            cpu: kernel.map_or(Nanos::ZERO, |k| k.cpu_per_launch),
            has_launch: launch.is_some(),
            launch_info: launch.unwrap_or(tessera_core::LaunchInfo {
                grid_blocks: 0,
                threads_per_block: 0,
                demand: tessera_core::PerMille(0),
            }),
            profiled: perf.profiles.contains_key(&job.kernel),
            tenant: job.tenant.id,
            class: job.tenant.class,
            kernel: job.kernel,
        }
    }

    /// Its kernel's launch as a task declares it.
    #[inline]
    fn launch(&self) -> Option<tessera_core::LaunchInfo> {
        self.has_launch.then_some(self.launch_info)
    }

    /// Its kernel's demand on the fluid and exclusive models (the whole GPU unless the
    /// kernel declares one); from its launch, which a submission reads anyway.
    #[inline]
    fn demand(&self) -> f64 {
        self.launch().map_or(1.0, |l| (f64::from(l.demand.0) / 1000.0).clamp(1e-3, 1.0))
    }

    fn outstanding(&self) -> usize {
        (self.next_task - self.ended) as usize
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
    /// Pending events. The next [`SimEvent::Tick`] is kept out of its heap and merged
    /// in its place: a policy quiet until later ([`Policy::quiet_until`]) has its ticks
    /// passed over in a stretch instead of each pushed and popped (gpu-lets' 100 µs
    /// ticks were 80% of `sim gpulets`' 564 million events: issue 55).
    queue: EventQueue,
    slots: Vec<Slot>,
    gpus: Vec<GpuSim>,
    migrations: Vec<Option<MigrationSim>>,
    /// Repartitions under way: the GPU and its new shares.
    pending_shares: Vec<(GpuId, Vec<PerMille>)>,
    /// Batched executions running: the first task, which names the execution in its
    /// slot, and every request in it.
    batches: BTreeMap<TaskId, Vec<TaskId>>,
    jobs: Vec<JobSim>,
    tasks: Vec<TaskState>,
    /// Whether any job's kernel has a measured profile; without one, the dispatch of
    /// a task to an exclusive or fluid slot reads nothing of its job's unless resident
    /// memory is tracked ([`Simulation::piece`]).
    any_profiled: bool,
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
            .map(|g| Slot::new(Placement::whole(g.id), opts.sharing, 1.0, opts.measure_gpus))
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
                meter: GpuMeter::default(),
                busy: Nanos::ZERO,
                resident_bytes: 0,
                energy: EnergyMeter::new(opts.perf.power, 0),
            })
            .collect();
        let jobs: Vec<JobSim> =
            workload.jobs.iter().map(|j| JobSim::new(j, workload, &opts.perf)).collect();
        let any_profiled = jobs.iter().any(|j| j.profiled);
        Simulation {
            workload,
            policy,
            now: Nanos::ZERO,
            queue: EventQueue::with_arrivals(workload.jobs.iter().map(|j| j.arrival)),
            slots,
            gpus,
            migrations: Vec::new(),
            pending_shares: Vec::new(),
            batches: BTreeMap::new(),
            jobs,
            tasks: Vec::with_capacity(workload.task_count()),
            any_profiled,
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
        self.queue.schedule(at, event);
    }

    /// Pass over every tick the policy said it would not act on (before its
    /// [`Policy::quiet_until`]) and that comes before the next queued event, counted as
    /// delivered ticks are: the same events, sequence numbers and queue lengths as if
    /// each had been delivered, so that nothing else in the run moves.
    fn skip_quiet_ticks(&mut self, queued_sum: &mut u64) -> Fallible {
        // (the policy asked only when a tick is pending: this runs on every event)
        let Some(at) = self.queue.tick_at() else { return Ok(()) };
        let Some(period) = self.policy.tick_interval() else { return Ok(()) };
        let until = self.policy.quiet_until().min(self.queue.next_at(false));
        if at >= until || period == Nanos::ZERO || !self.work_remains() {
            return Ok(());
        }
        let k = (until.0 - at.0).div_ceil(period.0);
        self.events += k;
        // each skipped tick popped from a queue holding the others and itself
        *queued_sum += k * self.queue.len() as u64;
        if self.events > self.opts.event_budget {
            return Err(Box::new(SimError::EventBudget(self.opts.event_budget)));
        }
        self.queue.skip_ticks(k, period);
        Ok(())
    }

    fn violation(&self, what: impl Into<String>) -> Box<SimError> {
        Box::new(SimError::PolicyViolation {
            policy: self.policy.label(),
            at_ns: self.now.0,
            what: what.into(),
        })
    }

    /// Run to completion and return what was measured.
    pub fn run(self) -> Result<RunMetrics, SimError> {
        self.run_boxed().map_err(|e| *e)
    }

    fn run_boxed(mut self) -> Fallible<RunMetrics> {
        // a job's counts are 32 bits ([`JobSim`]); a run holds at most 2^32 tasks anyway
        if let Some(j) =
            self.workload.jobs.iter().position(|j| u32::try_from(j.tasks.len()).is_err())
        {
            return Err(Box::new(SimError::TooLarge(format!("job {j} has more than 2^32 tasks"))));
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
            let Some((at, event)) = self.queue.pop() else { break };
            self.events += 1;
            queued_sum += self.queue.len() as u64 + 1;
            if self.events > self.opts.event_budget {
                return Err(Box::new(SimError::EventBudget(self.opts.event_budget)));
            }
            self.sample_gauges(at);
            self.now = at;
            match event {
                SimEvent::JobArrives(i) => self.job_arrives(i as usize)?,
                SimEvent::NextArrival(i) => self.open_arrival(i as usize)?,
                SimEvent::CpuPhaseEnds(i) => {
                    self.cpu_phases.0 -= 1;
                    self.submit_next(i as usize)?
                }
                SimEvent::TaskEnds { slot, task, generation } => {
                    self.task_ends(slot as usize, Some(TaskId(u64::from(task))), generation)?
                }
                SimEvent::SlotChanges { slot, generation } => {
                    self.task_ends(slot as usize, None, generation)?
                }
                SimEvent::ResetEnds(gpu) => {
                    self.gpus[gpu.0 as usize].resetting = false;
                    self.deliver(&Event::GpuResetDone { gpu })?;
                }
                SimEvent::MigrationArrives(i) => self.migration_arrives(i as usize)?,
                SimEvent::RepartitionEnds(gpu) => self.repartition_ends(gpu)?,
                SimEvent::PowerChanged { gpu, powered } => {
                    let now = self.now;
                    let g = &mut self.gpus[gpu.0 as usize];
                    g.powered = powered;
                    g.power_pending = false;
                    g.energy.set(now.0, powered, 0);
                    self.deliver(&Event::GpuPowerChanged { gpu, powered })?;
                }
                SimEvent::Tick => {
                    // Ticks keep coming only while work remains, so the run can end.
                    if self.work_remains() {
                        self.deliver(&Event::Tick)?;
                        if let Some(period) = self.policy.tick_interval() {
                            self.schedule(self.now + period, SimEvent::Tick);
                        }
                    }
                }
            }
        }
        // (the tasks submitted and not ended, counted as they go: a walk of the
        // records here was a second read of them all, 20 MB at 100x the bench's node)
        debug_assert_eq!(
            self.tasks_open,
            self.tasks.iter().filter(|t| t.record.end().is_none()).count()
        );
        let unfinished = self.tasks_open
            + self
                .workload
                .jobs
                .iter()
                .zip(&self.jobs)
                .filter(|(j, _)| !j.background)
                .map(|(j, s)| j.tasks.len() - s.next_task as usize)
                .sum::<usize>();
        if unfinished > 0 {
            return Err(Box::new(SimError::Stalled { policy: self.policy.label(), unfinished }));
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
        let class_of_job: Vec<ServiceClass> = self.jobs.iter().map(|j| j.class).collect();
        Ok(RunMetrics::from_records(
            self.tasks.iter().map(|t| &t.record),
            &host_per_job,
            &tenant_of_job,
            &class_of_job,
            // exclusive: the runs' own durations, as the paper's NVSMI measured; shared:
            // time with anything running (NVSMI's busy fraction; the runs overlap)
            self.gpus
                .iter()
                .map(|g| if exclusive { g.busy } else { g.meter.busy_union() })
                .collect(),
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

    /// When the earliest event waiting is due (queued or the tick; stale predictions
    /// count, which only brings it earlier).
    fn next_event_at(&self) -> Nanos {
        self.queue.next_at(true)
    }

    /// Of `ran` on a GPU by the execution led by `task`, the time its kernel ran: its
    /// kernel's host part ([`crate::workload::Kernel::host_per_task`]) comes first and
    /// is not busy time by NVSMI's reading.
    #[inline(always)]
    fn kernel_time(&self, task: TaskId, ran: Nanos) -> Nanos {
        ran - self.jobs[self.tasks[task.0 as usize].record.job()].host
    }

    /// Schedule the next finish in `slot` from its model, superseding any earlier
    /// prediction.
    #[inline(always)]
    fn predict_next(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.generation = s.generation.wrapping_add(1);
        let generation = s.generation;
        let slot = slot as u32;
        match s.model.next_wake() {
            Some((at, Some(id))) => {
                let task = Self::task_index(id);
                self.schedule(Nanos(at), SimEvent::TaskEnds { slot, task, generation })
            }
            Some((at, None)) => {
                self.schedule(Nanos(at), SimEvent::SlotChanges { slot, generation })
            }
            None => {}
        }
    }

    /// A task's id as a queued event holds it: 32 bits, as every index the queue
    /// holds ([`SimEvent`]); a run of more tasks than that is refused when submitted.
    #[inline]
    fn task_index(id: u64) -> u32 {
        debug_assert!(u32::try_from(id).is_ok(), "task ids fit 32 bits (checked at submission)");
        id as u32
    }

    /// `task` started running on `gpu`: its books (residency, busy time, energy).
    #[inline(always)]
    fn joined_gpu(&mut self, gpu: GpuId, task: TaskId) {
        let now = self.now;
        let state = &mut self.tasks[task.0 as usize];
        state.location = Location::Running;
        let job = state.record.job();
        let metered = self.opts.measure_gpus;
        let g = &mut self.gpus[gpu.0 as usize];
        g.meter.started(now);
        if !self.track_residency {
            return;
        }
        // (its job's line read only here: issue 55)
        let bytes = self.jobs[job].memory;
        if g.meter.joined(now, job) {
            g.resident_bytes += bytes;
            if metered {
                g.energy.set(now.0, g.powered, g.meter.residents());
            }
        }
    }

    /// `task` stopped running on `gpu` (finished, killed or moving away).
    #[inline(always)]
    fn left_gpu(&mut self, gpu: GpuId, task: TaskId) {
        let now = self.now;
        let state = &mut self.tasks[task.0 as usize];
        state.location = Location::Waiting;
        let job = state.record.job();
        let metered = self.opts.measure_gpus;
        let g = &mut self.gpus[gpu.0 as usize];
        g.meter.stopped(now);
        if !self.track_residency {
            return;
        }
        let bytes = self.jobs[job].memory;
        if g.meter.left(now, job) {
            g.resident_bytes -= bytes;
            if metered {
                g.energy.set(now.0, g.powered, g.meter.residents());
            }
        }
    }

    /// Declared memory of the tenants resident on `gpu`, plus `extra_job`'s if it is
    /// not resident yet.
    fn resident_memory(&self, gpu: GpuId, extra_job: usize) -> u64 {
        let g = &self.gpus[gpu.0 as usize];
        let extra = self.jobs[extra_job].memory;
        if extra == 0 || g.meter.is_resident(extra_job) {
            g.resident_bytes
        } else {
            g.resident_bytes + extra
        }
    }

    /// [`Self::deliver`] for an event that holds no heap data (a task's submission, a
    /// task's completion), not dropped after: its drop would free nothing, yet it was a
    /// call that matched the event's variant, twice per task (issue 55).
    fn deliver_plain(&mut self, event: Event) -> Fallible {
        debug_assert!(
            matches!(event, Event::TaskSubmitted(_) | Event::TaskFinished { result: Ok(()), .. }),
            "{event:?} may hold heap data"
        );
        let event = std::mem::ManuallyDrop::new(event);
        self.deliver(&event)
    }

    /// Tell the policy, then carry out what it answers.
    ///
    /// (By reference: a caller that builds the event knows its variant, so that one
    /// without heap data is dropped for nothing, where a move into here was a copy
    /// and a drop that matched the variant on every event.)
    fn deliver(&mut self, event: &Event) -> Fallible {
        // (empty here on every path that returns, so a clear is asked for only when it
        // has work: a clear's walk of no actions cost six instructions, twice per task)
        if !self.actions.is_empty() {
            self.actions.clear();
        }
        self.policy.on_event(self.now, event, &mut self.actions);
        // most events answer one action or none: taken without a drain (a tenth of a
        // task's engine cost on the exclusive path, issue 55), and the buffer taken
        // out of the engine only for several (applying one may deliver again, and
        // would use the buffer: empty by then in the one-action case)
        match self.actions.len() {
            0 => Ok(()),
            1 => match self.actions.pop() {
                Some(action) => self.apply(action),
                None => Ok(()),
            },
            _ => {
                let mut actions = std::mem::take(&mut self.actions);
                let applied = actions.drain(..).try_for_each(|action| self.apply(action));
                self.actions = actions;
                applied
            }
        }
    }

    fn gpu(&self, gpu: GpuId, what: &str) -> Fallible<&GpuSim> {
        self.gpus
            .get(gpu.0 as usize)
            .ok_or_else(|| self.violation(format!("{what} on unknown {gpu}")))
    }
}

fn ratio(weighted: u128, span: Nanos) -> f64 {
    if span.0 == 0 { 0.0 } else { weighted as f64 / span.0 as f64 }
}
