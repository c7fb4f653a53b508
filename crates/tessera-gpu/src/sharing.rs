//! The work running on one GPU, and when each piece of it finishes.
//!
//! Each piece has work (nanoseconds it takes alone at full speed) and a demand (the
//! share of the GPU it would occupy alone, from [`crate::occupancy`]). How the pieces
//! share the GPU:
//!
//! - [`Sharing::Exclusive`]: one piece at a time (Flexy's testbed);
//! - [`Sharing::Processor`]: co-running (MPS, or kernels of one context): while the
//!   summed demand D is at most the capacity C every piece runs at full speed; above
//!   it all slow in proportion, each at rate C/D (DCUDA §2: co-running applications
//!   slow each other only when their summed demand passes the GPU's capacity);
//! - [`Sharing::TimeSliced`]: contexts of different processes without MPS take turns:
//!   with n > 1 contexts each runs one slice in every n, and every turn pays a context
//!   switch, so each progresses at rate slice / (n * (slice + switch)). This is the
//!   fluid limit of round-robin slicing: it gets throughput right and ignores where in
//!   its turn a short piece arrives.
//!
//! A model may stand for a spatial partition rather than a whole GPU
//! ([`SharedGpu::with_capacity`]): its capacity is the partition's share, and a piece
//! demanding more than that runs below full speed even alone. Time slicing inside a
//! partition uses the pieces' mean demand for that bound (one common rate).
//!
//! In every mode all pieces progress at one common rate r(t), so one **virtual clock**
//! per GPU, V, advancing at r(t), says how much full-speed work each piece has done
//! since it started: a piece started at virtual time V0 with work w finishes when V
//! reaches V0 + w, whatever happens to the rate meanwhile. Pieces are kept in a vector
//! sorted by that finishing virtual time (a GPU holds a handful of pieces, where a
//! sorted vector beats a tree and allocates nothing per piece): a start is a binary
//! search and a short shift, the next finish is the first element, and a change of
//! rate touches no piece at all.
//!
//! Invariants (checked by the property tests): time never goes backwards; a piece
//! alone finishes after exactly its work; while the GPU is over-subscribed the
//! demand-weighted work done equals the capacity times the elapsed time; n identical
//! pieces started together finish together; finishing order does not depend on the
//! order of events at one instant; a paused GPU (resetting, migrating, powered down)
//! makes no progress; a piece removed and started again elsewhere neither loses nor
//! repeats work.

use serde::{Deserialize, Serialize};

/// Nanoseconds.
pub type Ns = u64;

/// Virtual time within which a piece counts as finished (a thousandth of a
/// nanosecond of work: absorbs floating-point rounding, never a real difference).
pub(crate) const FINISH_TOLERANCE: f64 = 1e-3;

/// The load band of a summed demand over the capacity: below 50%, 50-100%, above 100%
/// (the index into [`Usage::load_ns`]).
pub(crate) fn load_band(load: f64) -> usize {
    if load > 1.0 + 1e-9 {
        2
    } else if load >= 0.5 {
        1
    } else {
        0
    }
}

/// Whole nanoseconds until a piece `exact` ns of (rate-scaled) work from its end is
/// done, rounded up so that it is done by then; the small allowance keeps float noise
/// on an exact value from adding a nanosecond.
// (on every task's path: inlined, issue 55)
#[inline(always)]
pub(crate) fn finish_wait(exact: f64) -> Ns {
    if exact <= FINISH_TOLERANCE { 0 } else { crate::rounding::ceil_u64(exact - 1e-6).max(1) }
}

/// Identifies a piece of work (the caller's task id).
pub type PieceId = u64;

/// How pieces share the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sharing {
    /// One piece at a time.
    Exclusive,
    /// Co-running; all slow in proportion above the capacity.
    Processor,
    /// Time-sliced contexts (one piece per context).
    TimeSliced {
        /// Slice length, ns.
        slice: Ns,
        /// Context switch cost per turn, ns.
        switch: Ns,
    },
}

/// Why an operation was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SharingError {
    /// Time went backwards.
    #[error("time went backwards: {now} ns after {last} ns")]
    TimeBackwards {
        /// The time given.
        now: Ns,
        /// The model's time.
        last: Ns,
    },
    /// An exclusive GPU already runs a piece.
    #[error("the GPU is exclusive and already runs piece {0}")]
    Occupied(PieceId),
    /// The id is already running here.
    #[error("piece {0} already runs on this GPU")]
    Duplicate(PieceId),
    /// No such piece here.
    #[error("piece {0} does not run on this GPU")]
    Unknown(PieceId),
    /// A demand outside (0, 1].
    #[error("demand {0} is outside (0, 1]")]
    BadDemand(String),
}

/// A running piece.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Running {
    id: PieceId,
    /// Virtual time at which it finishes.
    finish_v: f64,
    /// Virtual time at which it started (for the work it has done).
    start_v: f64,
    demand: f64,
}

impl Running {
    /// Finishing order: virtual finish time, then id (so that ties do not depend on
    /// the order of starts).
    fn order(&self, other: &Running) -> std::cmp::Ordering {
        self.finish_v.total_cmp(&other.finish_v).then(self.id.cmp(&other.id))
    }
}

/// What the GPU did, integrated over time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Time with at least one piece running (NVSMI's "utilization" numerator).
    pub busy_ns: f64,
    /// Integral of min(summed demand x rate, capacity) over time: SM-share-weighted
    /// busy time (DCUDA's utilization numerator).
    pub sm_busy_ns: f64,
    /// Integral of the number of running pieces (for mean co-location).
    pub piece_ns: f64,
    /// Time with the summed demand over the capacity in [0, 50%), [50%, 100%] and above
    /// 100% (DCUDA's Figures 2 and 10: low, high, overloaded), idle time included.
    #[serde(default)]
    pub load_ns: [f64; 3],
}

/// One GPU's running work.
#[derive(Clone, Debug)]
pub struct SharedGpu {
    sharing: Sharing,
    /// Capacity in demand units (1.0 = the whole GPU).
    capacity: f64,
    now: Ns,
    /// Virtual time: full-speed work done by every running piece since time 0.
    v: f64,
    demand_sum: f64,
    paused: bool,
    /// Sorted by [`Running::order`].
    running: Vec<Running>,
    usage: Usage,
}

impl SharedGpu {
    /// An idle GPU of capacity 1 (the whole GPU) at time 0.
    pub fn new(sharing: Sharing) -> SharedGpu {
        SharedGpu::with_capacity(sharing, 1.0)
    }

    /// An idle spatial partition holding `capacity` of a GPU (0 < capacity <= 1; an
    /// MPS active-thread share): a piece demanding more than the partition holds runs
    /// at capacity / demand of its full speed, even alone.
    pub fn with_capacity(sharing: Sharing, capacity: f64) -> SharedGpu {
        SharedGpu {
            sharing,
            capacity: capacity.clamp(f64::MIN_POSITIVE, 1.0),
            now: 0,
            v: 0.0,
            demand_sum: 0.0,
            paused: false,
            running: Vec::new(),
            usage: Usage::default(),
        }
    }

    /// The share of a whole GPU this model holds (1 unless it is a partition).
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// How the pieces share it.
    pub fn sharing(&self) -> Sharing {
        self.sharing
    }

    /// Whether progress is stopped (reset, migration away, power-down).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The running pieces and the share of the whole GPU each holds now, in finishing
    /// order (for status displays).
    pub fn shares(&self) -> impl Iterator<Item = (PieceId, f64)> + '_ {
        self.running.iter().map(|r| (r.id, self.share_of_piece(r)))
    }

    /// The model's time.
    pub fn now(&self) -> Ns {
        self.now
    }

    /// Pieces running.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether nothing runs.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// What the GPU did so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The rate at which every running piece progresses (full-speed ns per ns).
    pub fn rate(&self) -> f64 {
        if self.paused || self.running.is_empty() {
            return 0.0;
        }
        match self.sharing {
            Sharing::Exclusive => (self.capacity / self.demand_sum).min(1.0),
            Sharing::Processor => {
                if self.demand_sum <= self.capacity {
                    1.0
                } else {
                    self.capacity / self.demand_sum
                }
            }
            Sharing::TimeSliced { slice, switch } => {
                let n = self.running.len() as f64;
                let alone = (self.capacity / self.demand_sum * n).min(1.0);
                if n <= 1.0 { alone } else { alone * slice as f64 / (n * (slice + switch) as f64) }
            }
        }
    }

    /// The share of the GPU a piece holds now (its demand times the common rate, or for
    /// time slicing its share of turns).
    pub fn share_of(&self, id: PieceId) -> Option<f64> {
        self.find(id).map(|r| self.share_of_piece(r))
    }

    fn share_of_piece(&self, r: &Running) -> f64 {
        match self.sharing {
            // a context holds the GPU (up to its demand) for its turns
            Sharing::TimeSliced { .. } => r.demand.min(self.capacity) * self.rate(),
            _ => r.demand * self.rate(),
        }
    }

    /// Move the model to `now`, integrating usage. Pieces whose finish passes are not
    /// removed here: ask [`SharedGpu::next_finish`] before moving past one.
    pub fn advance(&mut self, now: Ns) -> Result<(), SharingError> {
        if now < self.now {
            return Err(SharingError::TimeBackwards { now, last: self.now });
        }
        if now == self.now {
            // nothing to integrate (adding zeros leaves every float as it is): the
            // engine moves a slot to its present at each start and finish
            return Ok(());
        }
        let dt = (now - self.now) as f64;
        let r = self.rate();
        self.usage.load_ns[load_band(self.demand_sum / self.capacity)] += dt;
        if r > 0.0 {
            self.v += r * dt;
            self.usage.busy_ns += dt;
            let used = match self.sharing {
                Sharing::TimeSliced { .. } => {
                    // each context holds the GPU in turn: its demand while it runs
                    self.running.iter().map(|p| p.demand).sum::<f64>() * r
                }
                _ => self.demand_sum * r,
            };
            self.usage.sm_busy_ns += used.min(self.capacity) * dt;
            self.usage.piece_ns += self.running.len() as f64 * dt;
        }
        self.now = now;
        Ok(())
    }

    fn find(&self, id: PieceId) -> Option<&Running> {
        self.running.iter().find(|r| r.id == id)
    }

    fn check_demand(demand: f64) -> Result<(), SharingError> {
        if demand > 0.0 && demand <= 1.0 {
            Ok(())
        } else {
            Err(SharingError::BadDemand(format!("{demand}")))
        }
    }

    /// Start a piece of `work` ns (alone, at full speed) and `demand` at `now`.
    pub fn start(
        &mut self,
        now: Ns,
        id: PieceId,
        work: Ns,
        demand: f64,
    ) -> Result<(), SharingError> {
        Self::check_demand(demand)?;
        if self.find(id).is_some() {
            return Err(SharingError::Duplicate(id));
        }
        if self.sharing == Sharing::Exclusive
            && let Some(other) = self.running.first()
        {
            return Err(SharingError::Occupied(other.id));
        }
        self.advance(now)?;
        let piece = Running { id, finish_v: self.v + work as f64, start_v: self.v, demand };
        let at = self.running.partition_point(|r| r.order(&piece).is_lt());
        self.running.insert(at, piece);
        self.demand_sum += demand;
        Ok(())
    }

    /// Remove a piece at `now` (finished, cancelled, or leaving to migrate); returns
    /// the work it still had to do, ns at full speed.
    pub fn remove(&mut self, now: Ns, id: PieceId) -> Result<Ns, SharingError> {
        self.advance(now)?;
        let i = self.running.iter().position(|r| r.id == id).ok_or(SharingError::Unknown(id))?;
        let r = self.running.remove(i);
        self.demand_sum -= r.demand;
        if self.running.is_empty() {
            self.demand_sum = 0.0; // no rounding residue survives an empty GPU
        }
        Ok((r.finish_v - self.v).max(0.0).round() as Ns)
    }

    /// Full-speed work a piece has done so far.
    pub fn done(&self, id: PieceId) -> Option<f64> {
        self.find(id).map(|r| self.v - r.start_v)
    }

    /// Change a piece's demand at `now` (its kernel changed).
    pub fn set_demand(&mut self, now: Ns, id: PieceId, demand: f64) -> Result<(), SharingError> {
        Self::check_demand(demand)?;
        self.advance(now)?;
        let r = self.running.iter_mut().find(|r| r.id == id).ok_or(SharingError::Unknown(id))?;
        self.demand_sum += demand - r.demand;
        r.demand = demand;
        Ok(())
    }

    /// Stop or resume all progress at `now` (a reset, a migration away, power-down).
    pub fn set_paused(&mut self, now: Ns, paused: bool) -> Result<(), SharingError> {
        self.advance(now)?;
        self.paused = paused;
        Ok(())
    }

    /// The next piece to finish and when, at the current rate; `None` if nothing runs
    /// or nothing progresses.
    pub fn next_finish(&self) -> Option<(Ns, PieceId)> {
        let r = self.rate();
        if r <= 0.0 {
            return None;
        }
        let first = self.running.first()?;
        let (finish_v, id) = (first.finish_v, first.id);
        Some((self.now + finish_wait((finish_v - self.v) / r), id))
    }

    /// Move to `now` and take every piece finished by then, in finishing order (ties by
    /// id, so that the order of events at one instant does not matter).
    pub fn take_finished(&mut self, now: Ns) -> Result<Vec<PieceId>, SharingError> {
        let mut out = Vec::new();
        while let Some(id) = self.pop_finished(now)? {
            out.push(id);
        }
        Ok(out)
    }

    /// Move to `now` and take the first piece finished by then, if any — the
    /// allocation-free form of [`SharedGpu::take_finished`] for callers that handle
    /// one finish at a time.
    pub fn pop_finished(&mut self, now: Ns) -> Result<Option<PieceId>, SharingError> {
        self.advance(now)?;
        match self.running.first() {
            Some(r) if r.finish_v <= self.v + FINISH_TOLERANCE => {
                // the exclusive case (one piece) without shifting
                let r = if self.running.len() == 1 {
                    self.running.pop().expect("one piece")
                } else {
                    self.running.remove(0)
                };
                self.demand_sum =
                    if self.running.is_empty() { 0.0 } else { self.demand_sum - r.demand };
                Ok(Some(r.id))
            }
            _ => Ok(None),
        }
    }

    /// Run until nothing is left (or `limit`), returning (piece, finish time) in order.
    /// For tests and for predicting a fixed set of pieces.
    pub fn drain(&mut self, limit: Ns) -> Result<Vec<(PieceId, Ns)>, SharingError> {
        let mut out = Vec::new();
        while let Some((t, _)) = self.next_finish() {
            if t > limit {
                break;
            }
            let done = self.take_finished(t)?;
            debug_assert!(!done.is_empty(), "next_finish promised a piece at {t}");
            if done.is_empty() {
                break; // never spin: a broken promise ends the drain
            }
            out.extend(done.into_iter().map(|id| (id, t)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_alone_takes_its_work_and_two_under_capacity_do_not_slow() {
        let mut g = SharedGpu::new(Sharing::Processor);
        g.start(100, 1, 1_000, 0.4).unwrap();
        g.start(100, 2, 2_000, 0.5).unwrap();
        assert_eq!(g.drain(u64::MAX).unwrap(), vec![(1, 1_100), (2, 2_100)]);
        assert_eq!(g.usage().busy_ns, 2_000.0);
    }

    #[test]
    fn over_capacity_all_slow_in_proportion() {
        let mut g = SharedGpu::new(Sharing::Processor);
        // D = 1.6: rate 0.625; piece 1 (work 500) ends at 800, then piece 2 alone
        g.start(0, 1, 500, 0.8).unwrap();
        g.start(0, 2, 1_000, 0.8).unwrap();
        let done = g.drain(u64::MAX).unwrap();
        assert_eq!(done[0], (1, 800));
        // piece 2 did 500 by 800, then 500 at full speed
        assert_eq!(done[1], (2, 1_300));
    }

    #[test]
    fn exclusive_refuses_a_second_piece_and_time_slices_pay_switches() {
        let mut g = SharedGpu::new(Sharing::Exclusive);
        g.start(0, 1, 10, 1.0).unwrap();
        assert_eq!(g.start(0, 2, 10, 1.0), Err(SharingError::Occupied(1)));
        let mut t = SharedGpu::new(Sharing::TimeSliced { slice: 900, switch: 100 });
        t.start(0, 1, 900, 0.3).unwrap();
        t.start(0, 2, 900, 0.3).unwrap();
        // each at 900 / (2 * 1000) = 0.45: both end at 2000
        assert_eq!(t.drain(u64::MAX).unwrap(), vec![(1, 2_000), (2, 2_000)]);
    }

    #[test]
    fn a_partition_runs_work_at_its_share() {
        // half a GPU: a whole-GPU piece takes twice its work, a small one its work
        let mut p = SharedGpu::with_capacity(Sharing::Processor, 0.5);
        p.start(0, 1, 1_000, 1.0).unwrap();
        assert_eq!(p.drain(u64::MAX).unwrap(), vec![(1, 2_000)]);
        p.start(2_000, 2, 1_000, 0.4).unwrap();
        assert_eq!(p.drain(u64::MAX).unwrap(), vec![(2, 3_000)]);
        // exclusive partition, likewise; and the share a piece holds is capped by it
        let mut e = SharedGpu::with_capacity(Sharing::Exclusive, 0.25);
        e.start(0, 3, 1_000, 1.0).unwrap();
        assert_eq!(e.share_of(3), Some(0.25));
        assert_eq!(e.drain(u64::MAX).unwrap(), vec![(3, 4_000)]);
    }

    #[test]
    fn a_paused_gpu_makes_no_progress_and_time_cannot_go_back() {
        let mut g = SharedGpu::new(Sharing::Processor);
        g.start(0, 1, 1_000, 1.0).unwrap();
        g.set_paused(400, true).unwrap();
        assert_eq!(g.next_finish(), None);
        g.set_paused(10_400, false).unwrap();
        assert_eq!(g.next_finish(), Some((11_000, 1)));
        assert!(matches!(g.advance(5), Err(SharingError::TimeBackwards { .. })));
    }
}
