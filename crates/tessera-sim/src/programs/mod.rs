//! The program engine: tenants that are programs — loops of CPU work, asynchronous
//! and synchronous GPU calls and sleeps — each on a thread (a VM's vCPU) pinned to a
//! core of a modelled CPU, their GPU work queued on their own ring (a vGPU) and run by
//! one non-preemptive GPU whose time a core [`Policy`] hands out in quanta, exactly as
//! the daemon hands out launch-gate slices. Event-driven: no time step.
//!
//! **The CPU** ([`CpuModel`]): each core runs its runnable threads by a weighted fair
//! scheduler in the manner of Linux's CFS, which KVM's vCPUs run under: the thread with
//! the least weighted run time (`vruntime`, ns of core time / weight) runs; every
//! [`CpuModel::tick`] the core re-picks; a thread that blocks hands the core to the
//! next at once; a woken thread is placed at most [`CpuModel::wake_lag`] behind the
//! least `vruntime` of its core and preempts the running thread if it is behind it by
//! more than [`CpuModel::wakeup_granularity`]. Every switch costs
//! [`CpuModel::switch`] before the thread runs (the switch is charged to it).
//!
//! **Waiting for the GPU** ([`WaitMode`]): a thread waiting for its GPU work polls,
//! keeping its core (FairGV's Credit-poll), or spins for a while and then blocks until
//! the reply wakes it (hybrid spinning).
//!
//! **The GPU side**: a thread's asynchronous call puts a kernel on its ring (waiting
//! for room when the ring is full); a ring with kernels asks the policy for a quantum
//! (a task of its tenant). The online ring submits its kernels into the device's FIFO
//! queue, which runs one kernel at a time — whoever submitted it, so kernels submitted
//! in one quantum may run into the next. How a quantum submits and ends is the
//! client's launch gate ([`Gate`]): FairGV's collaborative scheduling (§3.3.2) or
//! simple time sharing (Credit's baseline). The quantum is charged the time it held
//! the GPU. A kernel's asynchronous call counts as done when the kernel has run, a
//! synchronous call when it returns.
//!
//! **Coscheduling** ([`Coscheduling`]): FairGV's GPU-centric form wakes the thread of
//! a CPU-GPU interactive tenant (the core's [`Interactivity`]) when its quantum starts;
//! tessera's daemon's form raises its thread's weight as a nice boost does for as long
//! as its quantum lasts;
//! Pegasus's CPU-centric form reports each core switch to a thread with GPU work
//! queued as [`Event::CoscheduleRequested`], which the core's Strict policy may answer
//! with [`Action::EndQuantum`].
//!
//! **Memory and the shared device** (schedGPU's node): a program may allocate and
//! free GPU memory, each allocation a [`Event::MemoryRequested`] that waits (its
//! thread blocked, its core idle) until the policy grants it; the engine checks that
//! what is granted never exceeds the GPU's memory. On [`Device::Shared`] the GPU is
//! `tessera-gpu`'s processor-shared model (`SharedGpu`, the one the task engine and
//! the daemon's emulated GPUs run): every launched kernel runs at once, keeping the GPU
//! busy its `intensity` of the time when alone, all slowed alike when together they
//! ask for more than the GPU; no quanta are asked for (the policy decides memory only).
//! With [`Admission::OnePerCore`] programs that run a fixed number of rounds start in
//! order, one per free core, as a batch queue does.
//!
//! **The block device** ([`Device::Blocks`]): kernels with launch shapes
//! ([`Phase::Shaped`]) on `tessera-gpu`'s block model ([`ConcurrentGpu`], the task
//! engine's model of DCUDA's GPUs), each program a context: every launched kernel's
//! blocks placed on the SMs at once, a kernel with many blocks holding up a small one
//! behind it. Like the shared device, no quanta and no rings; both run on the task
//! engine's slot model (`slot_model::SlotModel`), so the two engines share their GPU models.
//! Each tenant's kernels run on the GPU it names, or, with [`Placing::Policy`], each
//! launch is a task the policy places, migrates and sees end (`placed.rs`: DCUDA's
//! experiment).
//!
//! **Cores.** Threads stay on the core they name ([`Admission::Pinned`]), or a woken
//! or arriving one moves to an idle core as Linux places it ([`Admission::Floating`]).
//! A CPU tick that can change nothing is passed over, with the ticks before the next
//! event (counted as if delivered).
//!
//! [`ConcurrentGpu`]: tessera_gpu::concurrent::ConcurrentGpu

use crate::engine::SimError;
use crate::min_heap::{MinHeap, Timed};
use crate::slot_model::{Piece, Sharing, SlotModel};
use std::collections::VecDeque;
use tessera_core::event::MemoryWait;
use tessera_core::gate::SliceRule;
use tessera_core::policies::credit::Interactivity;
use tessera_core::{
    Action, Bytes, Event, GpuId, MemRequestId, Nanos, Placement, Policy, ServiceClass, TaskId,
    TaskSpec, TenantId, TenantSpec,
};
use tessera_gpu::concurrent::KernelLaunch;
use tessera_gpu::occupancy::{Launch, Shapes};
use tessera_ptx::{SliceConfig, plan};

pub use model::*;

/// A pending event (in the task engine's heap, `crate::min_heap`).
type Queued = Timed<Ev>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The running thread's current activity (switch, CPU work, spin) ends.
    Segment {
        core: usize,
        generation: u64,
    },
    /// Every core re-picks.
    CpuTick,
    SleepEnds(usize),
    /// A pinned tenant arrives.
    Arrives(usize),
    /// A migration's kernels reach their GPU (placed by the policy).
    MigrationArrives(usize),
    /// The device's front kernel ends.
    KernelEnds(u64),
    /// A direct device's GPU may have a kernel finished (the block model: or changes).
    SharedFinish {
        gpu: u32,
        generation: u64,
    },
    /// A synchronisation's idle GPU time ends.
    SyncEnds(u64),
    /// The online quantum's slice time is up.
    SliceUp(u64),
    /// The online quantum's idle hold may be over.
    IdleUp(u64),
    /// The online quantum may have launched nothing for the hold.
    QuietUp(u64),
    PolicyTick,
}

/// What a thread waits for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wait {
    /// Every kernel of its to have run; `call`: a synchronous call, counted at return.
    Drained { call: bool },
    /// Room on its ring for this kernel.
    Room(Nanos),
    /// A grant of its memory request.
    Memory { request: MemRequestId, granted: bool },
}

#[derive(Debug)]
struct Thread {
    weight: f64,
    /// How many times its weight counts now (coscheduling's boost; 1 otherwise).
    boost: f64,
    priority: u8,
    core: usize,
    /// Its GPU (the direct device's).
    gpu: usize,
    phases: Vec<Phase>,
    pc: usize,
    /// CPU work left of the current `Cpu` phase (set on entry).
    cpu_left: Nanos,
    in_cpu: bool,
    wait: Option<Wait>,
    spin_left: Nanos,
    blocked: bool,
    sleeping_until: Option<Nanos>,
    vruntime: f64,
    round_start: Nanos,
    /// Its ring: kernel lengths.
    ring: VecDeque<Nanos>,
    in_device: usize,
    /// Its quantum asked for and not yet ended.
    quantum: Option<TaskId>,
    calls: u64,
    gpu_ns: u64,
    cpu_ns: u64,
    picks: u64,
    /// Rounds still to run (`None`: for ever).
    rounds_left: Option<u32>,
    /// Started (registered with the policy) and not ended.
    admitted: bool,
    ended: Option<Nanos>,
    started: Nanos,
    /// Memory it was granted and holds.
    held: Bytes,
    /// Since when its current allocation waits.
    wait_since: Nanos,
    memory_wait_ns: u64,
    /// Kernels it launched on the shared device.
    launched: u64,
}

impl Thread {
    fn drained(&self) -> bool {
        self.ring.is_empty() && self.in_device == 0
    }

    fn wait_over(&self, ring: usize) -> bool {
        match self.wait {
            None => true,
            Some(Wait::Drained { .. }) => self.drained(),
            Some(Wait::Room(_)) => self.ring.len() < ring,
            Some(Wait::Memory { granted, .. }) => granted,
        }
    }
}

#[derive(Debug)]
struct Core {
    current: Option<usize>,
    /// Its activity's accounting runs from here.
    since: Nanos,
    /// The switch to `current` is paid until here.
    switch_until: Nanos,
    generation: u64,
}

/// The online quantum.
#[derive(Debug)]
struct Online {
    thread: usize,
    task: TaskId,
    since: Nanos,
    /// Kernels submitted in the slice (the gate's launch count).
    launches: u64,
    /// The measured kernel in flight: when it was submitted.
    measuring: Option<Nanos>,
    /// The measured kernels' times, each from its submission to its synchronisation's
    /// end (the gate's `synchronize` around it).
    measured: Nanos,
    /// Time measured by synchronisations after kernels counted at the mean.
    settled: Nanos,
    /// What the gate accounted: measured, settled and counted at the mean.
    used: Nanos,
    /// When the first kernel counted at the mean since the last synchronisation was
    /// submitted.
    unsynced_since: Option<Nanos>,
    /// The synchronisation under way measures kernels counted at the mean.
    settling: bool,
    /// Since when the tenant has had nothing in its ring or the device.
    idle_since: Option<Nanos>,
    /// When it last submitted a kernel.
    last_launch: Nanos,
    /// Its kernels counted at the mean are to be measured once they have run (the
    /// interposer's watcher found no launch for the hold).
    settle_wanted: bool,
    /// Submits nothing more; ends once its submitted work has run.
    draining: bool,
    generation: u64,
}

/// One run in progress.
#[derive(Debug)]
pub struct ProgramSim {
    model: NodeModel,
    policy: Box<dyn Policy>,
    now: Nanos,
    seq: u64,
    queue: MinHeap<Queued>,
    threads: Vec<Thread>,
    cores: Vec<Core>,
    /// Per core, the threads pinned to it, in ascending order (a pick scans only
    /// these: issue 55, the CPU's ticks re-pick every core every millisecond).
    on_core: Vec<Vec<usize>>,
    /// The device's queue: (thread, kernel length); the front runs unless a
    /// synchronisation is under way.
    device: VecDeque<(usize, Nanos)>,
    front_since: Option<Nanos>,
    syncing: bool,
    device_generation: u64,
    online: Option<Online>,
    online_generation: u64,
    /// Quanta asked for, by task id: the thread.
    task_owner: Vec<usize>,
    interactivity: Interactivity,
    busy_ns: u64,
    switches: u64,
    events: u64,
    actions: Vec<Action>,
    /// The direct device's GPU models, one per GPU ([`Device::Shared`]: the fluid
    /// model; [`Device::Blocks`]: the block model, of one or several GPUs; the task
    /// engine's slot models).
    shared: Vec<SlotModel>,
    /// The block device's kernels by id (launch order): their threads.
    piece_owner: Vec<usize>,
    /// Kernels placed by the policy, by id (as `piece_owner`; [`Placing::Policy`]).
    placed: Vec<placed::PlacedKernel>,
    /// The block device's launch shapes seen, with their occupancy (a placed
    /// kernel's demand).
    shapes: Option<Shapes>,
    /// Per thread, its placed kernels not yet finished.
    open_kernels: Vec<Vec<TaskId>>,
    /// Per thread, whether the policy raised its stream's priority.
    raised: Vec<bool>,
    /// Migrations under way, by id (taken when they arrive).
    moving: Vec<Option<placed::Moving>>,
    /// Per thread, the memory its tenant declares.
    declared: Vec<Bytes>,
    /// Per GPU, what the task engine measures of it (placed kernels only).
    meters: Vec<crate::gpu_meter::GpuMeter>,
    /// Threads in a CPU phase now, and the most at once.
    in_cpu: (usize, usize),
    /// Per GPU, the generation of its next event (a later one supersedes it).
    shared_generation: Vec<u64>,
    /// Memory requests by id: the thread.
    request_owner: Vec<usize>,
    /// When each tenant arrives (pinned admission).
    arrivals: Vec<Nanos>,
    memory_used: Bytes,
    /// Granted memory integrated over time, byte-ns.
    memory_integral: u128,
    /// Threads started and not ended, and threads not yet started.
    unfinished: usize,
    /// Events in the queue other than the periodic ticks.
    live_events: usize,
    /// Ticks processed in a row with nothing else left to happen and work unfinished
    /// (see [`QUIET_TICKS`]).
    quiet_ticks: usize,
    /// Something changed at `now` (a sample is due before time moves on).
    changed: bool,
    /// Per core, whether a CPU tick can change anything there
    /// ([`Self::core_tick_matters`]), and how many cores that is: kept as threads block,
    /// wake, move and switch, instead of walking every core's threads at each tick
    /// (issue 55: that walk, a cache miss per thread, was a twentieth of `sim dcuda`'s
    /// time).
    tick_cores: Vec<bool>,
    ticking: usize,
    samples: Option<Vec<Sample>>,
    /// The end of a run for a duration (`run`), while its events are processed.
    until: Option<Nanos>,
}

/// Ticks a run to the end processes with nothing else left to happen before it calls
/// the run stalled: DCUDA holds an application for at most a slice (100 ms) or a
/// moved application's stay (1 s) of ticks every 100 ms; a program that can never go
/// on is still reported, after these (issue 57: DCUDA with the daemon's constants was
/// called stalled at heavy load while its last application waited 54 ms for the slice
/// of a group that had left to end).
const QUIET_TICKS: usize = 1_000;

/// `phases` as the thread issues them: each [`Phase::LaunchGrid`] as its sub-kernels
/// under `slicing` (the interposer's plan), or whole.
fn issued(phases: &[Phase], slicing: Option<SliceConfig>) -> Vec<Phase> {
    let mut out = Vec::with_capacity(phases.len());
    for p in phases {
        let Phase::LaunchGrid { alone, grid } = *p else {
            out.push(*p);
            continue;
        };
        let Some(slices) = slicing.and_then(|c| plan(grid, c)) else {
            out.push(Phase::Launch(alone));
            continue;
        };
        // each its blocks' share of the time, the shares' rounding put on the last, so
        // that the sub-kernels together take the kernel's time
        let total: u64 = slices.iter().map(|s| u64::from(s.blocks)).sum();
        let mut given = 0u64;
        for (i, s) in slices.iter().enumerate() {
            let share = if i + 1 == slices.len() {
                alone.0 - given
            } else {
                (u128::from(alone.0) * u128::from(s.blocks) / u128::from(total)) as u64
            };
            given += share;
            out.push(Phase::Launch(Nanos(share)));
        }
    }
    out
}

impl ProgramSim {
    /// A run of `tenants` under `policy` on `model`'s node; what the node cannot run
    /// is refused here ([`validate`]), before anything runs.
    pub fn new(
        tenants: &[ProgramTenant],
        model: NodeModel,
        policy: Box<dyn Policy>,
    ) -> Result<ProgramSim, SimError> {
        validate::check(tenants, &model, &policy.label())?;
        let threads = tenants
            .iter()
            .map(|t| Thread {
                weight: f64::from(t.weight.max(1)),
                boost: 1.0,
                priority: t.priority,
                core: t.core,
                gpu: t.gpu as usize,
                phases: issued(&t.program.phases, model.slicing),
                pc: 0,
                cpu_left: Nanos::ZERO,
                in_cpu: false,
                wait: None,
                spin_left: Nanos::ZERO,
                sleeping_until: None,
                vruntime: 0.0,
                round_start: Nanos::ZERO,
                ring: VecDeque::new(),
                in_device: 0,
                quantum: None,
                calls: 0,
                gpu_ns: 0,
                cpu_ns: 0,
                picks: 0,
                rounds_left: t.program.rounds,
                admitted: false,
                ended: None,
                started: Nanos::ZERO,
                held: Bytes(0),
                wait_since: Nanos::ZERO,
                memory_wait_ns: 0,
                launched: 0,
                // not started: blocked until admitted
                blocked: true,
            })
            .collect();
        let cores = (0..model.cpu.cores)
            .map(|_| Core {
                current: None,
                since: Nanos::ZERO,
                switch_until: Nanos::ZERO,
                generation: 0,
            })
            .collect();
        let mut on_core = vec![Vec::new(); model.cpu.cores];
        for (i, t) in tenants.iter().enumerate() {
            if let Some(c) = on_core.get_mut(t.core) {
                c.push(i);
            }
        }
        Ok(ProgramSim {
            model,
            policy,
            now: Nanos::ZERO,
            seq: 0,
            queue: MinHeap::default(),
            threads,
            cores,
            on_core,
            device: VecDeque::new(),
            front_since: None,
            syncing: false,
            device_generation: 0,
            online: None,
            online_generation: 0,
            task_owner: Vec::new(),
            interactivity: Interactivity::default(),
            busy_ns: 0,
            switches: 0,
            events: 0,
            actions: Vec::new(),
            shared: (0..model.device.gpus())
                .map(|_| {
                    SlotModel::new(
                        match model.device {
                            Device::Blocks(b) => Sharing::Blocks {
                                limits: b.limits,
                                contexts: b.contexts,
                                contention: b.contention,
                            },
                            Device::Shared | Device::Queue(_) => Sharing::Processor,
                        },
                        1.0,
                        // (the GPU's usage is read: its SM-weighted busy time)
                        true,
                    )
                })
                .collect(),
            shared_generation: vec![0; model.device.gpus() as usize],
            piece_owner: Vec::new(),
            shapes: match model.device {
                Device::Blocks(b) => Some(Shapes::new(b.limits)),
                _ => None,
            },
            placed: Vec::new(),
            open_kernels: vec![Vec::new(); tenants.len()],
            raised: vec![false; tenants.len()],
            moving: Vec::new(),
            declared: tenants.iter().map(|t| t.declares).collect(),
            meters: vec![crate::gpu_meter::GpuMeter::default(); model.device.gpus() as usize],
            in_cpu: (0, 0),
            request_owner: Vec::new(),
            arrivals: tenants.iter().map(|t| t.arrive).collect(),
            memory_used: Bytes(0),
            memory_integral: 0,
            unfinished: tenants.len(),
            live_events: 0,
            quiet_ticks: 0,
            changed: true,
            // every thread starts blocked: no core has anything a tick could change
            tick_cores: vec![false; model.cpu.cores],
            ticking: 0,
            samples: None,
            until: None,
        })
    }

    /// Record the node's state at the end of every instant at which something
    /// changed (for time-series figures).
    pub fn sampled(mut self) -> ProgramSim {
        self.samples = Some(Vec::new());
        self
    }

    fn schedule(&mut self, at: Nanos, ev: Ev) {
        if !matches!(ev, Ev::CpuTick | Ev::PolicyTick) {
            self.live_events += 1;
        }
        self.queue.push(Queued { at, seq: self.seq, what: ev });
        self.seq += 1;
    }

    fn violation(&self, what: String) -> SimError {
        SimError::PolicyViolation { policy: self.policy.label(), at_ns: self.now.0, what }
    }

    /// Run for `duration` of simulated time.
    pub fn run(mut self, duration: Nanos) -> Result<ProgramOutcome, SimError> {
        self.start()?;
        self.event_loop(Some(duration))?;
        self.advance_to(duration);
        self.outcome()
    }

    /// Run until every program has ended (each must run a number of `rounds`); an
    /// error if one never can (a stall: nothing left to happen but ticks).
    pub fn run_to_end(mut self) -> Result<ProgramOutcome, SimError> {
        if self.threads.iter().any(|t| t.rounds_left.is_none()) {
            return Err(
                self.violation("a looping program never ends: run it for a duration".into())
            );
        }
        self.start()?;
        self.event_loop(None)?;
        if self.unfinished > 0 {
            return Err(SimError::Stalled {
                policy: self.policy.label(),
                unfinished: self.unfinished,
            });
        }
        self.outcome()
    }

    fn start(&mut self) -> Result<(), SimError> {
        match self.model.admission {
            Admission::Pinned | Admission::Floating => {
                for i in 0..self.threads.len() {
                    match self.arrivals[i] {
                        Nanos::ZERO => self.register(i)?,
                        at => self.schedule(at, Ev::Arrives(i)),
                    }
                }
                for c in 0..self.cores.len() {
                    self.repick(c)?;
                }
            }
            Admission::OnePerCore => self.admit()?,
        }
        // With every thread pinned to a core of its own a tick changes nothing: a woken
        // thread takes its idle core at once, and no two threads' run times are ever
        // compared (issue 55: DCUDA's twenty applications, each on its own core, spent
        // a fifth of their run re-picking cores every millisecond)
        let alone =
            self.model.admission == Admission::Pinned && self.on_core.iter().all(|c| c.len() <= 1);
        if self.model.cpu.tick > Nanos::ZERO && !alone {
            self.schedule(self.model.cpu.tick, Ev::CpuTick);
        }
        if let Some(p) = self.policy.tick_interval() {
            self.schedule(p, Ev::PolicyTick);
        }
        Ok(())
    }

    /// Move the clock to `at` (integrating the memory granted).
    fn advance_to(&mut self, at: Nanos) {
        if at > self.now {
            self.close_instant();
            let dt = (at - self.now).0;
            self.memory_integral += u128::from(self.memory_used.0) * u128::from(dt);
            self.now = at;
        }
    }

    /// Record the node's state if something changed at this instant.
    fn close_instant(&mut self) {
        if !std::mem::take(&mut self.changed) || self.samples.is_none() {
            return;
        }
        let gpu = self.shared.iter().map(SlotModel::busy_share).sum::<f64>()
            / self.shared.len().max(1) as f64;
        let memory = self.memory_used.0 as f64 / self.model.gpu_memory.0.max(1) as f64;
        let t = self.now.as_secs_f64();
        if let Some(samples) = &mut self.samples {
            samples.push(Sample { t, gpu, memory });
        }
    }

    /// Process events up to `until` (`None`: until every program has ended or nothing
    /// but ticks is left).
    fn event_loop(&mut self, until: Option<Nanos>) -> Result<(), SimError> {
        self.until = until;
        while let Some(&Queued { at, what: ev, .. }) = self.queue.peek() {
            match until {
                Some(d) if at > d => break,
                None if self.unfinished == 0 => break,
                // Only ticks are left: a policy may hold work until one (a slice of a
                // group that has left ends, a moved application's stay runs out), so
                // its ticks keep coming, as the task engine's do while work remains,
                // for as many as a stall needs to be told from a wait
                None if self.live_events == 0 => {
                    if self.quiet_ticks >= QUIET_TICKS {
                        break;
                    }
                    self.quiet_ticks += 1;
                }
                None => self.quiet_ticks = 0,
                _ => {}
            }
            self.queue.pop();
            self.advance_to(at);
            self.events += 1;
            if !matches!(ev, Ev::CpuTick | Ev::PolicyTick) {
                self.live_events -= 1;
            }
            match ev {
                Ev::Segment { core, generation } => {
                    if self.cores[core].generation == generation {
                        self.changed = true;
                        self.settle(core);
                        self.step(core)?;
                    }
                }
                Ev::CpuTick => {
                    let tick = self.model.cpu.tick;
                    let mut at = self.now + tick;
                    if self.tick_matters() {
                        for c in 0..self.cores.len() {
                            self.repick(c)?;
                        }
                    } else if let Some(&Queued { at: next, .. }) = self.queue.peek()
                        // a run for a duration counts the ticks up to its end only
                        && let next = until.map_or(next, |d| next.min(d + Nanos(1)))
                        && next > at
                    {
                        // nothing changes before the next event, so neither do the ticks
                        // before it: the next one that can is the first at or after it,
                        // after it (as the task engine passes quiet ticks over). They
                        // are counted, and take their sequence numbers, as if delivered.
                        let skipped = (next - self.now).0.div_ceil(tick.0) - 1;
                        at = self.now + Nanos(skipped * tick.0 + tick.0);
                        self.events += skipped;
                        self.seq += skipped;
                    }
                    self.schedule(at, Ev::CpuTick);
                }
                Ev::Arrives(t) => {
                    self.changed = true;
                    self.arrive(t)?;
                }
                Ev::MigrationArrives(m) => self.migration_arrives(m)?,
                Ev::SleepEnds(t) => {
                    self.changed = true;
                    self.threads[t].sleeping_until = None;
                    self.wake(t)?;
                }
                Ev::KernelEnds(g) if g == self.device_generation => {
                    self.changed = true;
                    self.kernel_ends()?;
                }
                Ev::SharedFinish { gpu, generation }
                    if self.shared_generation[gpu as usize] == generation =>
                {
                    self.changed = true;
                    self.shared_finishes(gpu as usize)?;
                }
                Ev::SyncEnds(g) if g == self.device_generation => {
                    self.changed = true;
                    self.syncing = false;
                    self.synchronised();
                    self.pump()?;
                    self.start_front();
                    self.maybe_release()?;
                }
                Ev::SliceUp(g) => {
                    if self.online.as_ref().is_some_and(|o| o.generation == g) {
                        self.changed = true;
                        self.end_quantum()?;
                    }
                }
                Ev::IdleUp(g) => {
                    if self.online.as_ref().is_some_and(|o| o.generation == g) {
                        self.changed = true;
                        self.maybe_release()?;
                    }
                }
                Ev::QuietUp(g) => {
                    if self.online.as_ref().is_some_and(|o| o.generation == g) {
                        self.changed = true;
                        self.quiet()?;
                    }
                }
                Ev::PolicyTick => {
                    self.deliver(Event::Tick)?;
                    if let Some(p) = self.policy.tick_interval() {
                        self.schedule(self.now + p, Ev::PolicyTick);
                    }
                }
                Ev::KernelEnds(_) | Ev::SyncEnds(_) | Ev::SharedFinish { .. } => {}
            }
        }
        Ok(())
    }

    fn outcome(mut self) -> Result<ProgramOutcome, SimError> {
        self.close_instant();
        let duration = self.now;
        for c in 0..self.cores.len() {
            self.settle(c);
        }
        // the kernel running at the end counts for its part
        if let (Some(since), Some(&(t, _))) = (self.front_since, self.device.front())
            && !self.syncing
        {
            let part = (duration - since).0;
            self.busy_ns += part;
            self.threads[t].gpu_ns += part;
        }
        let span = duration.0.max(1) as f64;
        let mut placed_gpus = Vec::new();
        let gpu_busy = match self.model.device {
            Device::Queue(_) => self.busy_ns as f64 / span,
            Device::Shared | Device::Blocks(_) => {
                let mut busy = 0.0;
                for g in 0..self.shared.len() {
                    if let Err(e) = self.shared[g].advance(duration.0) {
                        return Err(self.violation(format!("GPU {g}: {e}")));
                    }
                    let sm = self.shared[g].usage().sm_busy_ns;
                    busy += sm;
                    if self.policy_places().is_some() {
                        placed_gpus.push(placed::measures(
                            &mut self.meters[g],
                            duration,
                            duration,
                            sm,
                        ));
                    }
                }
                busy / (span * self.shared.len().max(1) as f64)
            }
        };
        Ok(ProgramOutcome {
            calls: self.threads.iter().map(|t| t.calls).collect(),
            gpu_busy,
            switches: self.switches,
            gpu_ns: self.threads.iter().map(|t| t.gpu_ns).collect(),
            cpu_ns: self.threads.iter().map(|t| t.cpu_ns).collect(),
            picks: self.threads.iter().map(|t| t.picks).collect(),
            events: self.events,
            duration_ns: duration.0,
            started_ns: self.threads.iter().map(|t| t.started.0).collect(),
            ended_ns: self.threads.iter().map(|t| t.ended.map(|e| e.0)).collect(),
            memory_wait_ns: self.threads.iter().map(|t| t.memory_wait_ns).collect(),
            memory_busy: self.memory_integral as f64 / self.model.gpu_memory.0.max(1) as f64 / span,
            samples: self.samples.take().unwrap_or_default(),
            placed_gpus,
            cpu_phases_at_most: self.in_cpu.1,
        })
    }
}

mod cpu;
mod gpu;
mod model;
mod placed;
mod tenants;
mod validate;

#[cfg(test)]
mod tests;
