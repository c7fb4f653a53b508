//! The performance model of one place work runs (a whole GPU or a partition), as the
//! task engine drives it: `tessera-gpu`'s exclusive model ([`ExclusiveGpu`]: one piece
//! at a time), its fluid model ([`SharedGpu`]: every piece at one common rate) or its
//! block model ([`ConcurrentGpu`]: kernels as thread blocks on SMs, each at its own
//! rate). Exclusive runs do not go through the fluid model: it computes the same
//! finishes, at several times the cost per task (issue 55). The engine speaks to both through
//! [`SlotModel`]; which one a run uses is its [`Sharing`].

use tessera_gpu::concurrent::{ConcurrentGpu, Contention, Contexts, KernelLaunch};
use tessera_gpu::exclusive::ExclusiveGpu;
use tessera_gpu::occupancy::SmLimits;
use tessera_gpu::sharing::{self, Ns, PieceId, SharedGpu};

/// What a raised stream adds to its tenant's priority on the block model: more than any
/// tenant priority (a `u8`), so that a raised stream outranks every stream not raised
/// (both engines' kernels).
pub(crate) const RAISED_STREAM: i32 = 1 << 8;

/// How the tasks running on one GPU (or partition) share it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sharing {
    /// One task at a time (Flexy's and schedGPU's testbeds); a dispatch to a busy GPU
    /// is a policy violation.
    Exclusive,
    /// Co-running tasks all slow in proportion once their summed demand passes the
    /// capacity (fluid processor sharing, [`SharedGpu`]).
    Processor,
    /// Fluid round-robin between tasks, `slice` ns each, `switch` ns lost per turn.
    TimeSliced {
        /// Slice length, ns.
        slice: Ns,
        /// Switch cost per turn, ns.
        switch: Ns,
    },
    /// Each task is a kernel of its workload kernel's launch shape, run as thread
    /// blocks on the SMs of a GPU of `limits` ([`ConcurrentGpu`]): a kernel with many
    /// blocks holds up a small one behind it. A partition is a GPU with its share of
    /// the SMs. Each tenant is a context.
    Blocks {
        /// The whole GPU's SMs and per-SM limits.
        limits: SmLimits,
        /// Whether contexts co-run (MPS, or DCUDA's spatial multiplexing) or take turns.
        contexts: Contexts,
        /// Slowdown of co-running kernels beyond SM sharing.
        contention: Contention,
    },
}

/// One slot's model.
#[derive(Debug)]
pub(crate) enum SlotModel {
    Exclusive(ExclusiveGpu),
    Fluid(SharedGpu),
    Blocks {
        gpu: Box<ConcurrentGpu>,
        /// Share of the whole GPU.
        capacity: f64,
    },
}

/// What a slot's model did, integrated over time, ns.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlotUsage {
    /// SM-share-weighted busy time.
    pub sm_busy_ns: f64,
    /// Integral of the pieces (kernels) present.
    pub piece_ns: f64,
    /// Time in each load band (below 50%, 50-100%, above 100%).
    pub load_ns: [f64; 3],
}

/// A task as the slot runs it: its time alone there, its demand (fluid) and its
/// launch (blocks).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece {
    pub work: Ns,
    pub demand: f64,
    pub launch: Option<KernelLaunch>,
}

impl SlotModel {
    /// An idle slot holding `capacity` of a GPU; `measured`: its usage is read (the
    /// exclusive model keeps none otherwise).
    pub(crate) fn new(sharing: Sharing, capacity: f64, measured: bool) -> SlotModel {
        let fluid = |s| SlotModel::Fluid(SharedGpu::with_capacity(s, capacity));
        match sharing {
            Sharing::Exclusive => {
                let gpu = ExclusiveGpu::with_capacity(capacity);
                SlotModel::Exclusive(if measured { gpu } else { gpu.without_usage() })
            }
            Sharing::Processor => fluid(sharing::Sharing::Processor),
            Sharing::TimeSliced { slice, switch } => {
                fluid(sharing::Sharing::TimeSliced { slice, switch })
            }
            Sharing::Blocks { limits, contexts, contention } => {
                let sms = ((f64::from(limits.sms) * capacity).round() as u32).clamp(1, limits.sms);
                SlotModel::Blocks {
                    gpu: Box::new(ConcurrentGpu::new(
                        SmLimits { sms, ..limits },
                        contexts,
                        contention,
                    )),
                    capacity,
                }
            }
        }
    }

    pub(crate) fn capacity(&self) -> f64 {
        match self {
            SlotModel::Exclusive(m) => m.capacity(),
            SlotModel::Fluid(m) => m.capacity(),
            SlotModel::Blocks { capacity, .. } => *capacity,
        }
    }

    pub(crate) fn now(&self) -> Ns {
        match self {
            SlotModel::Exclusive(m) => m.now(),
            SlotModel::Fluid(m) => m.now(),
            SlotModel::Blocks { gpu, .. } => gpu.now(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            SlotModel::Exclusive(m) => m.is_empty(),
            SlotModel::Fluid(m) => m.is_empty(),
            SlotModel::Blocks { gpu, .. } => gpu.is_empty(),
        }
    }

    /// Start `id` at `now`. Under the block model a piece without a launch shape is
    /// refused: the model cannot place what has no blocks.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub(crate) fn start(&mut self, now: Ns, id: PieceId, piece: Piece) -> Result<(), String> {
        match self {
            SlotModel::Exclusive(m) => {
                m.start(now, id, piece.work, piece.demand).map_err(|e| e.to_string())
            }
            SlotModel::Fluid(m) => {
                m.start(now, id, piece.work, piece.demand).map_err(|e| e.to_string())
            }
            SlotModel::Blocks { gpu, .. } => {
                let launch = piece
                    .launch
                    .ok_or_else(|| format!("task {id} has no launch shape for the block model"))?;
                let launch = KernelLaunch { alone_ns: piece.work, ..launch };
                gpu.start(now, id, launch).map_err(|e| e.to_string())
            }
        }
    }

    /// Take `id` off at `now`; the time alone it still needed.
    pub(crate) fn remove(&mut self, now: Ns, id: PieceId) -> Result<Ns, String> {
        match self {
            SlotModel::Exclusive(m) => m.remove(now, id).map_err(|e| e.to_string()),
            SlotModel::Fluid(m) => m.remove(now, id).map_err(|e| e.to_string()),
            SlotModel::Blocks { gpu, .. } => gpu.remove(now, id).map_err(|e| e.to_string()),
        }
    }

    pub(crate) fn advance(&mut self, now: Ns) -> Result<(), String> {
        match self {
            SlotModel::Exclusive(m) => m.advance(now).map_err(|e| e.to_string()),
            SlotModel::Fluid(m) => m.advance(now).map_err(|e| e.to_string()),
            SlotModel::Blocks { gpu, .. } => gpu.advance(now).map_err(|e| e.to_string()),
        }
    }

    /// When the engine must look at the slot again, and the piece it expects to end
    /// then (the fluid model knows it; the block model may change state before any
    /// kernel ends: a cohort of blocks, a slice or a switch ends).
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub(crate) fn next_wake(&mut self) -> Option<(Ns, Option<PieceId>)> {
        match self {
            SlotModel::Exclusive(m) => m.next_finish().map(|(at, id)| (at, Some(id))),
            SlotModel::Fluid(m) => m.next_finish().map(|(at, id)| (at, Some(id))),
            SlotModel::Blocks { gpu, .. } => gpu.next_event().map(|at| (at, None)),
        }
    }

    /// Run the block model's own changes (cohorts of blocks ending, slices, switches)
    /// that come before `horizon` and finish no kernel, stopping at the first that
    /// finishes one (then due at the model's time). Issue 55: each was an engine event
    /// of its own — popped, found to end nothing, predicted again — most of `sim
    /// dcuda`'s run; the caller passes its next event, before which nothing else can
    /// touch the slot, so the model ends where those events would have left it. The
    /// other models change only when a piece finishes: nothing to run.
    pub(crate) fn run_until_a_finish(&mut self, horizon: Ns) -> Result<(), String> {
        let SlotModel::Blocks { gpu, .. } = self else { return Ok(()) };
        while let Some(t) = gpu.next_event() {
            if t >= horizon || gpu.has_finished() {
                break;
            }
            gpu.advance(t).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A piece finished by `now`, if any (one per call).
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub(crate) fn pop_finished(&mut self, now: Ns) -> Result<Option<PieceId>, String> {
        match self {
            SlotModel::Exclusive(m) => m.pop_finished(now).map_err(|e| e.to_string()),
            SlotModel::Fluid(m) => m.pop_finished(now).map_err(|e| e.to_string()),
            SlotModel::Blocks { gpu, .. } => {
                gpu.advance(now).map_err(|e| e.to_string())?;
                Ok(gpu.pop_finished().map(|(id, _)| id))
            }
        }
    }

    /// The share of the slot busy now: the fluid model's summed shares (at most 1),
    /// the block model's SMs with a block resident, the exclusive model's whole.
    pub(crate) fn busy_share(&self) -> f64 {
        match self {
            SlotModel::Exclusive(m) => f64::from(u8::from(!m.is_empty())),
            SlotModel::Fluid(m) => m.shares().map(|(_, x)| x).sum::<f64>().min(1.0),
            SlotModel::Blocks { gpu, .. } => gpu.sm_share(),
        }
    }

    pub(crate) fn usage(&self) -> SlotUsage {
        match self {
            SlotModel::Exclusive(m) => {
                let u = m.usage();
                SlotUsage { sm_busy_ns: u.sm_busy_ns, piece_ns: u.piece_ns, load_ns: u.load_ns }
            }
            SlotModel::Fluid(m) => {
                let u = m.usage();
                SlotUsage { sm_busy_ns: u.sm_busy_ns, piece_ns: u.piece_ns, load_ns: u.load_ns }
            }
            SlotModel::Blocks { gpu, capacity } => {
                let u = gpu.usage();
                // SM time over the slot's SMs, as a share of the whole GPU
                SlotUsage {
                    sm_busy_ns: u.sm_busy_ns * *capacity,
                    piece_ns: u.kernel_ns,
                    load_ns: u.load_ns,
                }
            }
        }
    }
}
