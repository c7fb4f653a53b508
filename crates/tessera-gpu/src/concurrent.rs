//! Kernels on one GPU at their own rates: thread blocks placed on SMs.
//!
//! [`crate::sharing`] moves every piece of work on a GPU at one common rate, so a small
//! kernel is never held up by a big one beside it. Real GPUs do hold it up (DCUDA §2.3:
//! "applications with low resource demands are often blocked by applications with high
//! resource demands"), because the hardware's block scheduler hands out SMs block by
//! block, in order. This model does the same:
//!
//! - **Concurrent kernels** ([`Contexts::Shared`]: kernels of one context, or of several
//!   processes under MPS; DCUDA §1: kernels "run concurrently … by spatial
//!   multiplexing"). A kernel is a grid of blocks, each taking a block time on the SM
//!   it runs on. A greedy, in-order dispatcher takes the waiting kernels by stream
//!   priority (greater first), then by start time and id, and places each one's blocks
//!   breadth-first on the SMs where the occupancy arithmetic says they fit beside what
//!   is resident ([`crate::occupancy::SmUse::room_for`]). A kernel whose next block fits
//!   nowhere waits, and the next kernel gets whatever is left: so a kernel with many
//!   blocks takes the SMs a small kernel behind it would need, and the small one waits
//!   or gets the leftovers. A kernel's block time is its time alone over its waves
//!   alone (`ceil(blocks / (blocks_per_sm × SMs))`), so a kernel alone takes its time.
//! - **Time-sliced contexts** ([`Contexts::TimeSliced`]: processes without MPS, what the
//!   driver does). Only one context's kernels run at a time; while another context has
//!   work, the running one is switched out at the end of its slice: its resident blocks
//!   are preempted (compute preemption, Pascal and later) with the time they still
//!   need, the GPU runs nothing for the switch time, and the next context in turn
//!   resumes its blocks where they stopped. A context with the GPU to itself keeps it.
//! - **Contention** ([`Contention`]): co-running kernels whose summed demand D passes
//!   the GPU (D > 1) slow each other beyond what SM sharing explains (memory bandwidth,
//!   caches): a block started then takes `1 + slowdown_per_excess × (D − 1)` times its
//!   time, so throughput drops below capacity. 0 by default; any other value is fitted
//!   on a baseline's numbers and reported where it is used.
//! - **Partitions**: a partition is a GPU of its own size — a model built with the
//!   partition's SMs.
//!
//! Times are kept in picoseconds inside, so that a kernel alone ends within a
//! nanosecond of its work whatever its waves; the interface is in nanoseconds, and a
//! finish is reported at the first nanosecond at or after it.
//!
//! Invariants (checked by the tests): time never goes backwards; a kernel alone
//! finishes after its time alone (to the nanosecond); without contention every block
//! runs exactly its block time, across preemptions and pauses; no kernel finishes
//! twice, and every kernel started and not removed finishes; kernels started at one
//! instant are placed the same whatever the order of the calls; a paused GPU
//! (resetting, migrating) makes no progress.

use crate::occupancy::{BlockCost, Launch, Shapes, SmLimits, SmUse};
use crate::sharing::{Ns, PieceId};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

mod chain;
mod dispatch;
mod ends;
mod preempt;
mod table;
mod usage;

use ends::Ends;
use table::{Kernels, Waiting};

/// Picoseconds.
type Ps = u64;
const PS_PER_NS: u64 = 1000;

/// How the kernels of different contexts share the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Contexts {
    /// Every kernel may co-run (one context, or MPS).
    Shared,
    /// Contexts take turns of `slice` ns, paying `switch` ns at each change.
    TimeSliced {
        /// A context's turn while others wait, ns.
        slice: Ns,
        /// The GPU's idle time at each change of context, ns.
        switch: Ns,
    },
}

/// The contention parameter (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Contention {
    /// A block's slowdown per unit of summed demand above the GPU's capacity.
    pub slowdown_per_excess: f64,
}

/// A kernel to run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelLaunch {
    /// The context (process) it belongs to.
    pub context: u32,
    /// Its grid and per-thread resources.
    pub launch: Launch,
    /// How long it takes alone on this GPU, ns.
    pub alone_ns: Ns,
    /// Its stream's priority: greater is dispatched first.
    pub priority: i32,
}

/// What went wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConcurrentError {
    /// Time went backwards.
    #[error("time went backwards: {now} ns after {last} ns")]
    TimeBackwards {
        /// The time given.
        now: Ns,
        /// The model's time.
        last: Ns,
    },
    /// A kernel of that id runs already.
    #[error("kernel {0} runs already")]
    Duplicate(PieceId),
    /// No kernel of that id runs.
    #[error("no kernel {0} runs")]
    Unknown(PieceId),
    /// A block of the kernel fits on no SM, even an empty one.
    #[error("a block of kernel {0} fits on no SM")]
    DoesNotFit(PieceId),
}

/// Busy times so far, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ConcurrentUsage {
    /// Time any block was resident.
    pub busy_ns: f64,
    /// SM time with at least one block resident (SM-ns over the SM count: at most
    /// `busy_ns`).
    pub sm_busy_ns: f64,
    /// Thread slots in use (thread-ns over the GPU's thread slots).
    pub thread_busy_ns: f64,
    /// Time spent switching contexts.
    pub switching_ns: f64,
    /// Integral of the kernels present (waiting, running or preempted), kernel-ns.
    pub kernel_ns: f64,
    /// Time with the summed occupancy demand of the kernels present in [0, 50%),
    /// [50%, 100%] and above 100% of the GPU (DCUDA's load bands), idle time included.
    pub load_ns: [f64; 3],
}

/// [`ConcurrentUsage`]'s integrals, exact: picoseconds times whole counts. As floating
/// sums their last bits depended on how often the model was advanced (each advance
/// adds a term), so a caller that looked at the GPU more or less often, or a model
/// that ran several waves in one step, moved a run's measures (issue 55).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Integrals {
    /// ps with a block resident.
    busy: u128,
    /// ps × SMs with a block resident.
    sm_busy: u128,
    /// ps × threads resident.
    thread_busy: u128,
    /// ps switching contexts.
    switching: u128,
    /// ps × kernels present.
    kernels: u128,
    /// ps in each load band.
    load: [u128; 3],
}

/// Repeated waves ahead, found and not yet stepped (issue 55). A cohort's end is a
/// repeat when its kernel runs its next wave on the same SMs and nothing else changes
/// ([`ConcurrentGpu::repeat_wave`]: no kernel ahead of it fits on the SMs it frees,
/// and it has the cohort's blocks left). Between changes of any other kind the SMs are
/// as they are now at every end, so a kernel whose cohorts' ends are repeats once keeps
/// repeating — each cohort every wave's time — until its blocks run short; several
/// kernels may repeat side by side (two kernels' waves interleaving). The chain is
/// every cohort end from `first` (the first end, a repeat) until `next`, the first
/// change that is not one: a kernel's end with too few blocks left, the end of a
/// cohort whose kernel does not repeat, or two ends at one instant. A kernel that came
/// to the GPU part by part keeps several cohorts ending in turn, round after round in
/// the same order (all within one wave's time). Kept until the model changes in any
/// other way; `first == next`: looked for, none.
#[derive(Clone, Copy, Debug)]
struct Chain {
    /// The first repeat: the first cohort's end.
    first: Ps,
    /// The first change that is not a repeat: every cohort end before it is one.
    next: Ps,
}

/// A cohort of a chain ([`Chain`]): it ends at `end`, then every `duration`.
#[derive(Clone, Copy, Debug)]
struct Repeating {
    cohort: usize,
    /// Its kernel's slot.
    kernel: u32,
    /// Its blocks (a cohort's count, at most an SM's blocks times the SMs: a search
    /// meeting one beyond 32 bits finds no chain), read here rather than from the
    /// cohort table again.
    count: u32,
    end: Ps,
    duration: Ps,
}

#[derive(Clone, Debug)]
struct Kernel {
    id: PieceId,
    context: u32,
    cost: BlockCost,
    priority: i32,
    started: Ns,
    /// Blocks not placed yet.
    pending: u64,
    /// Blocks placed (resident, or frozen with their context).
    placed: u64,
    total: u64,
    block_ps: Ps,
    demand: f64,
    alone_ns: Ns,
    /// Block time run so far, ps (without contention: `total × block_ps` at the end).
    ran_ps: u128,
}

/// Blocks of one kernel placed together: they end together.
#[derive(Clone, Debug, Default)]
struct Cohort {
    /// Its kernel's slot in [`Kernels`] (while live).
    slot: u32,
    /// (SM, blocks) of the placement.
    on: Vec<(u32, u32)>,
    count: u64,
    /// When it started running (or resumed), ps.
    since: Ps,
    finish: Ps,
    /// Its blocks' slowdown.
    stretch: f64,
    /// Time still needed while frozen, ps.
    frozen_left: Ps,
    live: bool,
    frozen: bool,
}

/// The kernels running on one GPU (see the module docs).
#[derive(Clone, Debug)]
pub struct ConcurrentGpu {
    limits: SmLimits,
    contexts: Contexts,
    contention: Contention,
    now: Ps,
    sms: Vec<SmUse>,
    kernels: Kernels,
    /// Kernels with blocks to place, in dispatch order.
    waiting: Waiting,
    /// Kernels present per context.
    per_context: BTreeMap<u32, usize>,
    cohorts: Vec<Cohort>,
    free_cohorts: Vec<usize>,
    /// The ends of the live cohorts not frozen, one each.
    ends: Ends,
    /// Cohorts placed at `now` (taken back and placed again if more kernels start at
    /// the same instant, so that the order of the calls does not matter).
    fresh: Vec<usize>,
    /// The context whose kernels run (time slicing), its slice's end, and the end of
    /// a switch under way (to `next`).
    active: Option<u32>,
    slice_end: Ps,
    switching: Option<(Ps, u32)>,
    /// When the active context's turn began on an idle GPU, or a switch began: a
    /// choice made at this instant is made again as more kernels start at it.
    chosen_at: Option<Ps>,
    paused: bool,
    dirty: bool,
    finished: VecDeque<(PieceId, Ns)>,
    usage: Integrals,
    sms_in_use: u32,
    threads_in_use: u64,
    /// Summed occupancy demand of the kernels present.
    demand_present: f64,
    /// A use no SM is below in any resource (the least use, or less): the room it
    /// leaves bounds every SM's, so the dispatcher passes over a kernel that fits
    /// nowhere without a walk of the SMs. Lowered as SMs give resources back, exact
    /// after each placement; placing only takes, so it stays a bound (issue 55: a
    /// walk of the SMs for it was a tenth of each dispatch).
    room_bound: SmUse,
    /// The contention's stretch of blocks placed by the last dispatch.
    stretch: f64,
    /// Whether the kernels present changed since `stretch` was computed.
    stretch_stale: bool,
    /// The launches' block shapes seen, with their occupancy arithmetic.
    shapes: Shapes,
    /// Scratch: the cohorts ending at one instant.
    ending: Vec<usize>,
    /// Scratch: (SM, blocks) of one placement, swapped into its cohort.
    scratch: Vec<(u32, u32)>,
    /// Scratch: each SM's room for the kernel being placed, and how many SMs have
    /// each room.
    rooms: Vec<u32>,
    by_room: Vec<u32>,
    /// Scratch: the slots of the kernels waiting, in order.
    order: Vec<u32>,
    /// Scratch: the block costs that found no room in a dispatch.
    no_room: Vec<BlockCost>,
    /// Whether only cohorts ending changed the SMs since the last dispatch's placements
    /// (then only the SMs they freed, `freed`, can have room for a waiting kernel).
    walk_freed: bool,
    /// SMs freed since the last dispatch (repeats possible).
    freed: Vec<u32>,
    /// Scratch: the SMs a dispatch looks at.
    walk: Vec<u32>,
    /// The repeated waves ahead, if looked for since the last change (`Some` with no
    /// repeats: looked for, none).
    chain: Option<Chain>,
    /// The chain's cohorts (scratch while it is looked for).
    chain_cohorts: Vec<Repeating>,
    /// Scratch of the chain's search.
    chain_scratch: chain::Scratch,
    /// Tests: step every wave (the reference the chains are compared with).
    #[cfg(test)]
    no_chains: bool,
    /// Tests: dispatches that placed blocks.
    #[cfg(test)]
    placing_dispatches: u64,
    /// Tests: walks of the SMs to place a kernel's blocks.
    #[cfg(test)]
    placement_walks: u64,
    /// Per finished kernel: block time run, and blocks × block time (tests).
    #[cfg(test)]
    ran_at_end: BTreeMap<PieceId, (u128, u128)>,
}

fn ceil_ns(ps: Ps) -> Ns {
    ps.div_ceil(PS_PER_NS)
}

/// The least use of each resource on any of `sms` (a full SM if there are none): what
/// [`ConcurrentGpu::room_bound`] must not be above (tests).
#[cfg(test)]
fn least_used(sms: &[SmUse], limits: &SmLimits) -> SmUse {
    sms.iter().fold(SmUse::full(limits), |m, u| m.least(u))
}

impl ConcurrentGpu {
    /// An idle GPU of `limits` (a partition: its own SM count).
    pub fn new(limits: SmLimits, contexts: Contexts, contention: Contention) -> Self {
        ConcurrentGpu {
            limits,
            contexts,
            contention,
            now: 0,
            sms: vec![SmUse::default(); limits.sms as usize],
            kernels: Kernels::default(),
            waiting: Waiting::default(),
            per_context: BTreeMap::new(),
            cohorts: Vec::new(),
            free_cohorts: Vec::new(),
            ends: Ends::default(),
            fresh: Vec::new(),
            active: None,
            slice_end: 0,
            switching: None,
            chosen_at: None,
            paused: false,
            dirty: false,
            finished: VecDeque::new(),
            usage: Integrals::default(),
            sms_in_use: 0,
            threads_in_use: 0,
            demand_present: 0.0,
            room_bound: SmUse::default(),
            stretch: 1.0,
            stretch_stale: true,
            shapes: Shapes::new(limits),
            ending: Vec::new(),
            scratch: Vec::with_capacity(limits.sms as usize),
            rooms: vec![0; limits.sms as usize],
            by_room: Vec::new(),
            no_room: Vec::new(),
            order: Vec::new(),
            walk_freed: false,
            freed: Vec::new(),
            walk: Vec::new(),
            chain: None,
            chain_cohorts: Vec::new(),
            chain_scratch: chain::Scratch::default(),
            #[cfg(test)]
            no_chains: false,
            #[cfg(test)]
            placing_dispatches: 0,
            #[cfg(test)]
            placement_walks: 0,
            #[cfg(test)]
            ran_at_end: BTreeMap::new(),
        }
    }

    /// The model's time, ns (rounded up).
    pub fn now(&self) -> Ns {
        ceil_ns(self.now)
    }

    /// Kernels present (waiting, running or preempted).
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    /// Whether no kernel is present.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// Whether the GPU is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The share of the SMs with a block resident now.
    pub fn sm_share(&self) -> f64 {
        f64::from(self.sms_in_use) / f64::from(self.limits.sms.max(1))
    }

    /// Blocks of kernel `id` resident on SMs now (0 while waiting or preempted).
    pub fn resident_blocks(&self, id: PieceId) -> u64 {
        let Some(slot) = self.kernels.slot_of(id) else { return 0 };
        self.cohorts.iter().filter(|c| c.live && !c.frozen && c.slot == slot).map(|c| c.count).sum()
    }

    /// Start kernel `id` at `now`.
    pub fn start(&mut self, now: Ns, id: PieceId, k: KernelLaunch) -> Result<(), ConcurrentError> {
        self.advance(now)?;
        self.changed_from_outside();
        if self.kernels.slot_of(id).is_some() {
            return Err(ConcurrentError::Duplicate(id));
        }
        let cost = self.shapes.block_cost(&k.launch).ok_or(ConcurrentError::DoesNotFit(id))?;
        let occ = self.shapes.occupancy(&k.launch);
        let slots = u64::from(occ.blocks_per_sm) * u64::from(self.limits.sms);
        let waves = k.launch.grid_blocks.div_ceil(slots.max(1)).max(1);
        // rounded down: the kernel alone ends within its last nanosecond
        let block_ps = k.alone_ns * PS_PER_NS / waves;
        let slot = self.kernels.insert(Kernel {
            id,
            context: k.context,
            cost,
            priority: k.priority,
            started: now,
            pending: k.launch.grid_blocks,
            placed: 0,
            total: k.launch.grid_blocks,
            block_ps,
            demand: occ.demand,
            alone_ns: k.alone_ns,
            ran_ps: 0,
        });
        *self.per_context.entry(k.context).or_default() += 1;
        self.demand_present += occ.demand;
        self.stretch_stale = true;
        if k.launch.grid_blocks == 0 {
            self.end_kernel(slot);
        } else {
            self.waiting.insert((Reverse(k.priority), now, id), slot);
        }
        self.dirty = true;
        Ok(())
    }

    /// Take kernel `id` off the GPU at `now`; the time alone it still needed, ns.
    pub fn remove(&mut self, now: Ns, id: PieceId) -> Result<Ns, ConcurrentError> {
        self.advance(now)?;
        self.changed_from_outside();
        let slot = self.kernels.slot_of(id).ok_or(ConcurrentError::Unknown(id))?;
        let k = self.kernels.get(slot).ok_or(ConcurrentError::Unknown(id))?;
        let mut left = u128::from(k.pending) * u128::from(k.block_ps);
        for i in 0..self.cohorts.len() {
            let c = &self.cohorts[i];
            if !c.live || c.slot != slot {
                continue;
            }
            let rest = if c.frozen { c.frozen_left } else { c.finish - self.now };
            left += (rest as f64 / c.stretch) as u128 * u128::from(c.count);
            self.retire_cohort(i);
        }
        let k = self.kernels.remove(slot).ok_or(ConcurrentError::Unknown(id))?;
        self.waiting.remove(&k.wait_key());
        self.leave_context(k.context);
        self.forget_demand(k.demand);
        self.stretch_stale = true;
        self.fresh.retain(|c| self.cohorts[*c].live);
        self.dirty = true;
        let whole = u128::from(k.total) * u128::from(k.block_ps);
        Ok((u128::from(k.alone_ns) * left).checked_div(whole).unwrap_or(0) as Ns)
    }

    /// Pause (a reset, a migration, power off) or resume the GPU at `now`: while
    /// paused nothing progresses; resumed blocks go on where they stopped.
    pub fn set_paused(&mut self, now: Ns, paused: bool) -> Result<(), ConcurrentError> {
        self.advance(now)?;
        self.changed_from_outside();
        if paused == self.paused {
            return Ok(());
        }
        if paused {
            self.freeze(None);
            self.paused = true;
            // the slice and a switch under way stop with the GPU
            self.slice_end = self.slice_end.saturating_sub(self.now);
            if let Some((until, to)) = self.switching {
                self.switching = Some((until.saturating_sub(self.now), to));
            }
        } else {
            self.paused = false;
            self.slice_end += self.now;
            if let Some((left, to)) = self.switching {
                self.switching = Some((left + self.now, to));
            } else {
                match self.contexts {
                    Contexts::Shared => self.thaw(None),
                    Contexts::TimeSliced { .. } => {
                        if let Some(a) = self.active {
                            self.thaw(Some(a));
                        }
                    }
                }
            }
            self.dirty = true;
        }
        Ok(())
    }

    /// When the state next changes by itself (a block cohort ends, a slice or a
    /// switch ends), or now while a finished kernel waits to be collected, ns; `None`
    /// while nothing can happen. A kernel's waves that repeat on the same SMs with
    /// nothing else changing are not changes a caller must see: they run when the
    /// model is advanced past them (issue 55: each was a step, and an event of the
    /// simulator's, most of `sim dcuda`'s run).
    pub fn next_event(&mut self) -> Option<Ns> {
        if self.dirty {
            self.dispatch();
        }
        // a kernel found finished by a call that advanced the model (a start, a
        // removal) is due now: its finish must not wait for the next change
        if !self.finished.is_empty() {
            return Some(ceil_ns(self.now));
        }
        self.next_internal().map(ceil_ns)
    }

    /// Whether a kernel has finished and not been popped yet.
    pub fn has_finished(&self) -> bool {
        !self.finished.is_empty()
    }

    /// Kernels finished by now, with the nanosecond each finished at, oldest first.
    pub fn pop_finished(&mut self) -> Option<(PieceId, Ns)> {
        self.finished.pop_front()
    }

    /// Move the model to `now`, running everything that happens until then.
    pub fn advance(&mut self, now: Ns) -> Result<(), ConcurrentError> {
        let until = now * PS_PER_NS;
        if until < self.now {
            return Err(ConcurrentError::TimeBackwards { now, last: ceil_ns(self.now) });
        }
        self.advance_ps(until);
        Ok(())
    }

    fn advance_ps(&mut self, until: Ps) {
        loop {
            if self.dirty {
                self.dispatch();
            }
            if let Some(chain) = self.chain_ahead()
                && chain.first <= until
            {
                self.run_chain(chain, until);
                continue;
            }
            match self.next_internal() {
                Some(t) if t <= until => self.step(t),
                _ => break,
            }
        }
        self.account(until);
        if until > self.now {
            self.fresh.clear();
        }
        self.now = until;
    }

    /// The cohort ending first: (its end, its index).
    #[inline]
    fn first_cohort(&self) -> Option<(Ps, usize)> {
        self.ends.peek()
    }

    fn next_internal(&mut self) -> Option<Ps> {
        if self.paused {
            return None;
        }
        if let Some(chain) = self.chain_ahead() {
            return Some(chain.next);
        }
        let cohort = self.first_cohort().map(|(t, _)| t);
        let switch = self.switching.map(|(t, _)| t);
        let slice = match self.contexts {
            Contexts::TimeSliced { slice, .. }
                if self.switching.is_none() && self.others_waiting() =>
            {
                self.renew_slice(slice);
                Some(self.slice_end)
            }
            _ => None,
        };
        // (by hand: an iterator over the three options compiled to a loop that was a
        // fifth of DCUDA's run)
        let min = |a: Option<Ps>, b: Option<Ps>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) => x,
            (None, y) => y,
        };
        min(min(cohort, switch), slice)
    }

    /// A context alone renews its slice at each boundary: the one under way now ends
    /// at the next.
    fn renew_slice(&mut self, slice: Ns) {
        if self.slice_end < self.now {
            let slice = (slice * PS_PER_NS).max(1);
            self.slice_end += (self.now - self.slice_end).div_ceil(slice) * slice;
        }
    }

    /// Whether a context other than the active one has kernels.
    fn others_waiting(&self) -> bool {
        match self.active {
            Some(a) => self.per_context.keys().any(|c| *c != a),
            None => false,
        }
    }

    fn step(&mut self, t: Ps) {
        self.chain = None;
        self.account(t);
        if t > self.now {
            self.fresh.clear();
        }
        self.now = t;
        // every cohort ending now, then the context's turn
        let clean = !self.dirty;
        let mut ending = std::mem::take(&mut self.ending);
        ending.clear();
        while let Some((at, i)) = self.ends.peek() {
            if at != t {
                break;
            }
            self.ends.pop();
            ending.push(i);
        }
        if !(clean && ending.len() == 1 && self.repeat_wave(ending[0])) {
            for &i in &ending {
                self.end_cohort(i);
            }
        }
        self.ending = ending;
        if let Some((until, to)) = self.switching
            && until == t
        {
            self.switching = None;
            self.begin_turn(to);
        } else if let Contexts::TimeSliced { slice, switch } = self.contexts
            && self.switching.is_none()
            && self.slice_end == t
        {
            if self.others_waiting() {
                let next = self.next_context();
                self.freeze(self.active);
                self.switching = Some((t + switch * PS_PER_NS, next));
                self.chosen_at = Some(t);
                self.dirty = true;
            } else {
                self.slice_end = t + slice * PS_PER_NS;
            }
        }
    }

    /// Cohort `i` ends now: its blocks' time is counted, its SMs freed, its kernel
    /// ends if nothing of it is left, and the dispatcher runs again.
    fn end_cohort(&mut self, i: usize) {
        let c = &self.cohorts[i];
        let slot = c.slot;
        let ran = u128::from(self.now - c.since) * u128::from(c.count);
        if let Some(k) = self.kernels.get_mut(slot) {
            k.ran_ps += ran;
        }
        self.retire_cohort(i);
        if self.kernels.get(slot).is_some_and(|k| k.pending == 0 && k.placed == 0) {
            self.end_kernel(slot);
        }
        self.dirty = true;
    }

    /// The context after the active one, in turn, among those with kernels.
    fn next_context(&self) -> u32 {
        let a = self.active.unwrap_or(0);
        self.per_context
            .range(a.saturating_add(1)..)
            .next()
            .or_else(|| self.per_context.iter().next())
            .map_or(a, |(c, _)| *c)
    }

    fn begin_turn(&mut self, context: u32) {
        self.walk_freed = false;
        self.active = Some(context);
        if let Contexts::TimeSliced { slice, .. } = self.contexts {
            self.slice_end = self.now + slice * PS_PER_NS;
        }
        self.thaw(Some(context));
        self.dirty = true;
    }

    fn end_kernel(&mut self, slot: u32) {
        if let Some(k) = self.kernels.remove(slot) {
            #[cfg(test)]
            self.ran_at_end.insert(k.id, (k.ran_ps, u128::from(k.total) * u128::from(k.block_ps)));
            self.waiting.remove(&k.wait_key());
            self.leave_context(k.context);
            self.forget_demand(k.demand);
            self.stretch_stale = true;
            self.finished.push_back((k.id, ceil_ns(self.now)));
        }
    }

    fn leave_context(&mut self, context: u32) {
        if let Some(n) = self.per_context.get_mut(&context) {
            *n -= 1;
            if *n == 0 {
                self.per_context.remove(&context);
            }
        }
    }

    fn forget_demand(&mut self, demand: f64) {
        // exactly 0 once the GPU is empty, whatever the rounding of the sums
        self.demand_present =
            if self.kernels.is_empty() { 0.0 } else { (self.demand_present - demand).max(0.0) };
    }

    /// Put a preempted cohort's blocks back on its SMs (the counterpart of
    /// [`Self::release_sms`]; placements keep the same books in their own walk).
    fn occupy_sms(&mut self, i: usize, cost: &BlockCost) {
        let (mut woken, mut blocks) = (0u32, 0u64);
        for &(sm, n) in &self.cohorts[i].on {
            let used = &mut self.sms[sm as usize];
            woken += u32::from(used.blocks == 0);
            used.take(cost, n);
            blocks += u64::from(n);
        }
        self.sms_in_use += woken;
        self.threads_in_use += blocks * u64::from(cost.threads);
    }

    /// A change from outside (a kernel started or removed, a pause): the chain ahead
    /// and the dispatcher's walk of the freed SMs alone no longer hold.
    fn changed_from_outside(&mut self) {
        self.chain = None;
        self.walk_freed = false;
    }

    /// Give back a live cohort's SMs (if resident) and forget it.
    fn retire_cohort(&mut self, i: usize) {
        let (slot, count, frozen) = {
            let c = &self.cohorts[i];
            (c.slot, c.count, c.frozen)
        };
        if !frozen {
            self.release_sms(i);
        }
        if let Some(k) = self.kernels.get_mut(slot) {
            k.placed -= count;
        }
        let c = &mut self.cohorts[i];
        c.live = false;
        c.frozen = false;
        self.ends.remove(i);
        self.free_cohorts.push(i);
    }

    fn release_sms(&mut self, i: usize) {
        let Some(cost) = self.kernels.get(self.cohorts[i].slot).map(|k| k.cost) else { return };
        // the books kept once for the whole cohort (a tenth of DCUDA's run was per-SM
        // updates): each SM held some of its blocks, so each one left empty is one
        // fewer in use
        let on = std::mem::take(&mut self.cohorts[i].on);
        self.freed.extend(on.iter().map(|(sm, _)| *sm));
        let mut bound = self.room_bound;
        let (mut emptied, mut blocks) = (0u32, 0u64);
        for &(sm, n) in &on {
            let used = &mut self.sms[sm as usize];
            used.give_back(&cost, n);
            emptied += u32::from(used.blocks == 0);
            bound = bound.least(used);
            blocks += u64::from(n);
        }
        self.room_bound = bound;
        self.sms_in_use -= emptied;
        self.threads_in_use = self.threads_in_use.saturating_sub(blocks * u64::from(cost.threads));
        self.cohorts[i].on = on;
    }
}

#[cfg(test)]
mod tests;
