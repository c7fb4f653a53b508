//! What the program engine is given and gives back: programs as phases, their tenants,
//! the CPU, the launch gate, coscheduling, the device, admission, the node, and a run's
//! outcome and samples.

use serde::{Deserialize, Serialize};
use tessera_core::gate::SliceRule;
use tessera_core::{Bytes, Nanos};
use tessera_gpu::concurrent::{Contention, Contexts};
use tessera_gpu::migration::MigrationCost;
use tessera_gpu::occupancy::{Launch, SmLimits};
use tessera_ptx::SliceConfig;

/// One step of a program.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Phase {
    /// Work on the CPU, ns of core time.
    Cpu(Nanos),
    /// An asynchronous GPU call: a kernel of this length onto the thread's ring (on
    /// the shared device: a kernel of this length alone, keeping the GPU busy).
    Launch(Nanos),
    /// An asynchronous GPU call of a kernel of `grid` blocks that takes `alone`: with
    /// kernel slicing on the node ([`NodeModel::slicing`]) and the grid above its
    /// threshold, issued as the interposer issues it — the sub-kernels of
    /// `tessera_ptx::launch::plan`, the plan the interposer follows, in order, each a
    /// [`Phase::Launch`] of its blocks' share of the time (the launch gate consulted
    /// before each) — else one [`Phase::Launch`].
    LaunchGrid {
        /// Its duration alone, whole.
        alone: Nanos,
        /// Its grid, blocks in x, y and z.
        grid: [u32; 3],
    },
    /// An asynchronous GPU call on the shared device: a kernel that takes `alone` by
    /// itself and keeps the GPU busy `intensity` (0-1] of that time.
    Kernel {
        /// Its duration alone.
        alone: Nanos,
        /// The share of the GPU it keeps busy.
        intensity: f64,
    },
    /// An asynchronous GPU call on the block device ([`Device::Blocks`]): a kernel of
    /// this launch shape that takes `alone` by itself, run as thread blocks on the SMs
    /// beside the other programs' kernels (the task engine's block model).
    Shaped {
        /// Its duration alone on the whole GPU.
        alone: Nanos,
        /// Its grid and per-thread resources.
        launch: Launch,
    },
    /// Allocate GPU memory: waits, blocked, until the policy grants it.
    Alloc(Bytes),
    /// Free GPU memory it holds.
    Free(Bytes),
    /// A synchronous call: waits until every kernel of the thread has run.
    Sync,
    /// Waits for the thread's kernels like `Sync`, but is not a call.
    Drain,
    /// Sleeps (blocked) so that sleeping is this share of the program's round: the time
    /// since the round began, times `share / (1 - share)`.
    SleepShare(f64),
}

/// A program: its phases, run in a loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// The phases of one round.
    pub phases: Vec<Phase>,
    /// Rounds it runs before it ends (and leaves its core and memory); `None` loops
    /// for ever.
    #[serde(default)]
    pub rounds: Option<u32>,
}

impl Program {
    /// A program that runs `phases` in a loop for ever.
    pub fn looping(phases: Vec<Phase>) -> Program {
        Program { phases, rounds: None }
    }

    /// A program that runs `phases` once and ends.
    pub fn once(phases: Vec<Phase>) -> Program {
        Program { phases, rounds: Some(1) }
    }
}

/// One tenant: a program on a thread pinned to a core, with a weight for the CPU and
/// the GPU alike (a VM of one vCPU and one vGPU).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramTenant {
    /// Weight (at least 1).
    pub weight: u32,
    /// The core its thread is pinned to (with [`Admission::OnePerCore`]: ignored, the
    /// first free core).
    pub core: usize,
    /// Its priority, for policies that have them (schedGPU's priority notification).
    #[serde(default)]
    pub priority: u8,
    /// When it arrives (with [`Admission::Pinned`]; 0: at the start): DCUDA's
    /// applications arrive one after another.
    #[serde(default)]
    pub arrive: Nanos,
    /// The GPU its kernels run on (of the block device's [`BlocksDevice::gpus`]; 0
    /// on the others, which are one GPU).
    #[serde(default)]
    pub gpu: u32,
    /// Memory it declares when it registers, beyond its largest allocation (DCUDA's
    /// applications declare theirs; a migration copies it).
    #[serde(default)]
    pub declares: Bytes,
    /// What it runs.
    pub program: Program,
}

/// The host CPU's scheduler. Every value is ours (a model of CFS and KVM), not a paper's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuModel {
    /// Cores.
    pub cores: usize,
    /// A thread switch on a core (KVM's halt, wake and switch).
    pub switch: Nanos,
    /// A woken thread preempts the running one only if behind it by more than this
    /// (weighted ns).
    pub wakeup_granularity: Nanos,
    /// A woken thread's `vruntime` is at least the core's least minus this.
    pub wake_lag: Nanos,
    /// How often each core re-picks its thread.
    pub tick: Nanos,
}

/// How a thread waits for its GPU work.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum WaitMode {
    /// Polls, keeping its core, until the reply.
    Poll,
    /// Spins this long, then blocks until the reply wakes it.
    Hybrid {
        /// The spin.
        spin: Nanos,
    },
}

/// How the online tenant submits its kernels and when its quantum ends: the client
/// side of a quantum (the interposer's launch gate in the daemon).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Gate {
    /// FairGV's collaborative scheduling (§3.3.2) by the interposer's rule
    /// ([`tessera_core::gate`], the one its launch gate calls): the kernels of a slice
    /// the rule measures are submitted one at a time and each synchronised, costing
    /// `sync` of idle GPU; later ones are counted at their mean and submitted until
    /// the count reaches the slice, then synchronised after the last (which measures
    /// them). The quantum ends when that work has run, when the slice's time is up and
    /// what was submitted has run, or — work conserving — once the tenant has had
    /// nothing in the ring or the device for the rule's hold. It is charged what its
    /// gate measured, never more than it held the GPU (not work conserving: the whole
    /// time it held it).
    Collaborative {
        /// The slice.
        slice: Nanos,
        /// The gate's rule: launches measured, idle hold.
        rule: SliceRule,
        /// Idle GPU time of one synchronisation.
        sync: Nanos,
        /// False: the tenant asks for its turn and keeps it for the whole slice, work
        /// or none, polling its ring (§5.4.5's non-work-conserving FairGV).
        work_conserving: bool,
    },
    /// Simple time sharing (Credit's baseline): the online ring submits all it can and
    /// keeps the GPU for its whole slice, work or none; its kernels still in the device
    /// run on after it.
    TimeShare {
        /// The slice.
        slice: Nanos,
    },
}

impl Gate {
    pub(super) fn slice(self) -> Nanos {
        match self {
            Gate::Collaborative { slice, .. } | Gate::TimeShare { slice } => slice,
        }
    }
}

/// Which coscheduling the node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Coscheduling {
    /// None.
    None,
    /// FairGV's (§3.2.3): when an interactive tenant's quantum starts, its blocked
    /// thread is woken (the CPU scheduler's wake-up rules decide whether it runs).
    GpuCentric,
    /// tessera's daemon's form of it (`tesserad`'s `cosched.rs`): from an interactive
    /// tenant's quantum's start until it ends, its thread weighs as CFS weighs a
    /// thread raised [`tessera_core::interactive::BOOST_NICE`] nice levels (its run
    /// time counts that much less, and its wake-up granularity, which Linux scales by
    /// the woken thread's weight, that much shorter); it is not woken early.
    Boost,
    /// Pegasus's: each core switch to a thread whose ring holds kernels is reported to
    /// the policy as a coscheduling request.
    CpuCentric,
}

/// How the GPU runs kernels.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Device {
    /// One kernel at a time from a FIFO queue, its time handed out in quanta by the
    /// policy through the launch gate (FairGV's non-preemptive testbed).
    Queue(QueueDevice),
    /// Processor sharing on `tessera-gpu`'s shared model, every launched kernel at once
    /// and no quanta, no rings (schedGPU's node: the policy decides memory only).
    Shared,
    /// `tessera-gpu`'s block model, the one the task engine runs DCUDA's GPUs on:
    /// every launched kernel ([`Phase::Shaped`]) placed as thread blocks on the SMs at
    /// once, each program a context; no quanta, no rings (the policy decides memory
    /// only). A kernel with many blocks holds up a small one behind it (DCUDA §2.3).
    Blocks(BlocksDevice),
}

/// The block device: a GPU of these SMs, its contexts and contention.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlocksDevice {
    /// GPUs, each of these SMs (at least one): a tenant's kernels run on the one it
    /// names ([`ProgramTenant::gpu`]).
    pub gpus: u32,
    /// Each GPU's SMs and per-SM limits.
    pub limits: SmLimits,
    /// Whether the programs' kernels co-run (MPS, one context) or take turns.
    pub contexts: Contexts,
    /// Slowdown of co-running kernels beyond SM sharing.
    pub contention: Contention,
    /// Who decides where a kernel runs.
    #[serde(default)]
    pub placing: Placing,
}

/// Who decides where the block device's kernels run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum Placing {
    /// Each tenant's kernels run on the GPU it names ([`ProgramTenant::gpu`]) as they
    /// are launched; the policy decides memory only.
    #[default]
    Home,
    /// The policy, as on the task engine: each launch is a task submitted to it
    /// ([`tessera_core::Event::TaskSubmitted`], with its launch shape), run on the GPU
    /// its dispatch names, its end reported; it may move a tenant's running kernels to
    /// another GPU ([`tessera_core::Action::Migrate`]: they stop, and resume there with
    /// the blocks they have left after `migration` of the tenant's declared memory,
    /// [`ProgramTenant::declares`]) and raise a tenant's stream priority for the
    /// kernels dispatched after (DCUDA's policy).
    Policy {
        /// What moving a tenant costs.
        migration: MigrationCost,
    },
}

impl Device {
    /// How many GPUs it is.
    pub fn gpus(&self) -> u32 {
        match self {
            Device::Blocks(b) => b.gpus,
            Device::Queue(_) | Device::Shared => 1,
        }
    }
}

/// The queue device: each tenant's ring, the device's queue and the launch gate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueDevice {
    /// Kernels a ring holds (an asynchronous call waits while it is full).
    pub ring: usize,
    /// Kernels the device's queue holds, all tenants together.
    pub depth: usize,
    /// The launch gate.
    pub gate: Gate,
}

/// When tenants start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Admission {
    /// All at time 0 (or at their arrival), each thread on the core it is pinned to.
    Pinned,
    /// As [`Admission::Pinned`], each thread first on the core it names; a thread
    /// woken or arriving while that core has a runnable thread moves to the lowest
    /// core with none, as Linux's wake-up placement picks an idle CPU for a woken
    /// task (`select_idle_sibling`); with none idle it stays and waits its turn. A
    /// busy thread is never moved (no periodic load balancing).
    Floating,
    /// In order, each on the lowest core no running tenant holds, as cores free up: a
    /// batch queue of one job per core (schedGPU §6). Programs must end (`rounds`).
    OnePerCore,
}

/// The node's options.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeModel {
    /// The CPU.
    pub cpu: CpuModel,
    /// How threads wait for their GPU work (a memory allocation always blocks).
    pub wait: WaitMode,
    /// How the GPU runs kernels.
    pub device: Device,
    /// Coscheduling.
    pub coscheduling: Coscheduling,
    /// When tenants start.
    pub admission: Admission,
    /// The GPU's memory.
    pub gpu_memory: Bytes,
    /// Kernel slicing ([`Phase::LaunchGrid`]): off (`None`) by default, as in the
    /// interposer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slicing: Option<SliceConfig>,
}

/// The node's state at one instant (recorded by [`super::ProgramSim::sampled`] runs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Time, seconds.
    pub t: f64,
    /// GPU utilisation (0-1): on a device of several GPUs their mean; on the block
    /// device the share of SMs with a block resident.
    pub gpu: f64,
    /// GPU memory granted (0-1).
    pub memory: f64,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramOutcome {
    /// Calls each tenant completed (asynchronous: its kernel ran; synchronous: it
    /// returned).
    pub calls: Vec<u64>,
    /// Share of the run the GPU ran a kernel (on a device of several GPUs their mean;
    /// on the block device SM-weighted).
    pub gpu_busy: f64,
    /// Thread switches, all cores.
    pub switches: u64,
    /// Per tenant: GPU time its kernels ran, ns.
    pub gpu_ns: Vec<u64>,
    /// Per tenant: time its thread held its core, ns.
    pub cpu_ns: Vec<u64>,
    /// Per tenant: quanta it was given.
    pub picks: Vec<u64>,
    /// Events processed.
    pub events: u64,
    /// The run's length, ns: the duration asked for, or when the last program ended.
    pub duration_ns: u64,
    /// Per tenant: when it started, ns.
    pub started_ns: Vec<u64>,
    /// Per tenant: when its program ended, ns (`None`: it did not).
    pub ended_ns: Vec<Option<u64>>,
    /// Per tenant: time its allocations waited, ns.
    pub memory_wait_ns: Vec<u64>,
    /// Mean share of the GPU's memory granted over the run (0-1).
    pub memory_busy: f64,
    /// The node at the end of every instant something changed (sampled runs only).
    pub samples: Vec<Sample>,
    /// Per GPU of a block device the policy places ([`Placing::Policy`]; empty
    /// otherwise): what the task engine measures of a GPU.
    #[serde(default)]
    pub placed_gpus: Vec<PlacedGpu>,
    /// The most threads in a CPU phase at once, on a core or waiting for it.
    #[serde(default)]
    pub cpu_phases_at_most: usize,
}

/// One GPU of a block device the policy places, over the run, as the task engine
/// measures it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlacedGpu {
    /// Share of the run with a kernel running (NVSMI's busy fraction).
    pub busy: f64,
    /// Share of its SMs in use, over the run (DCUDA §3.2's utilization).
    pub sm_weighted: f64,
    /// Tenants with a kernel running beyond the first, integrated: app-seconds.
    pub extra_app_s: f64,
}
