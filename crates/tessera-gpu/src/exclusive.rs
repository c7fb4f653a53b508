//! One piece at a time on a GPU or partition (Flexy's and schedGPU's testbeds): the
//! one-piece case of [`crate::sharing::SharedGpu`] without its general machinery (a
//! sorted vector of pieces, a rate recomputed from the sharing mode at every step),
//! which the simulator's exclusive runs paid for on every task (issue 55).
//!
//! It computes exactly what `SharedGpu` in [`Sharing::Exclusive`] mode computes — the
//! same virtual clock, the same floating-point operations in the same order, the same
//! rounding of a finish to whole nanoseconds — so that a run's results do not move by
//! a nanosecond when the simulator switches between them. The property test below
//! drives both with the same operations and compares every answer and the usage bit
//! for bit.
//!
//! [`Sharing::Exclusive`]: crate::sharing::Sharing::Exclusive

use crate::sharing::{FINISH_TOLERANCE, Ns, PieceId, SharingError, Usage, finish_wait, load_band};

#[derive(Clone, Copy, Debug, PartialEq)]
struct Piece {
    id: PieceId,
    finish_v: f64,
    demand: f64,
}

/// A GPU (or partition) that runs one piece at a time.
#[derive(Clone, Debug)]
pub struct ExclusiveGpu {
    capacity: f64,
    now: Ns,
    /// Virtual time: full-speed work done since time 0 (as `SharedGpu`'s).
    v: f64,
    piece: Option<Piece>,
    usage: Usage,
    /// Whether `usage` is integrated: not for a run that never reads it (the
    /// simulator's runs without per-GPU measurements), where its terms were a tenth of
    /// the model's work per task (issue 55). The clock and the finishes do not depend
    /// on it.
    integrate: bool,
}

impl ExclusiveGpu {
    /// An idle GPU (or partition of `capacity`, clamped to (0, 1]) at time 0.
    pub fn with_capacity(capacity: f64) -> ExclusiveGpu {
        ExclusiveGpu {
            capacity: capacity.clamp(f64::MIN_POSITIVE, 1.0),
            now: 0,
            v: 0.0,
            piece: None,
            usage: Usage::default(),
            integrate: true,
        }
    }

    /// The same GPU keeping no usage ([`ExclusiveGpu::usage`] then stays zero): every
    /// other answer is the one the GPU that keeps it gives (the property test below).
    pub fn without_usage(mut self) -> ExclusiveGpu {
        self.integrate = false;
        self
    }

    /// The share of a whole GPU it holds.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// The model's time.
    pub fn now(&self) -> Ns {
        self.now
    }

    /// Whether nothing runs.
    pub fn is_empty(&self) -> bool {
        self.piece.is_none()
    }

    /// What it did so far (zero if built [`ExclusiveGpu::without_usage`]).
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The running piece's rate (full-speed ns per ns); 0 when idle.
    #[inline]
    fn rate(&self) -> f64 {
        match &self.piece {
            Some(p) => (self.capacity / p.demand).min(1.0),
            None => 0.0,
        }
    }

    /// Move to `now`, integrating usage.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub fn advance(&mut self, now: Ns) -> Result<(), SharingError> {
        if now < self.now {
            return Err(SharingError::TimeBackwards { now, last: self.now });
        }
        if now == self.now {
            return Ok(());
        }
        let dt = (now - self.now) as f64;
        let r = self.rate();
        if r > 0.0 {
            self.v += r * dt;
        }
        if self.integrate {
            let demand = self.piece.map_or(0.0, |p| p.demand);
            self.usage.load_ns[load_band(demand / self.capacity)] += dt;
            if r > 0.0 {
                self.usage.busy_ns += dt;
                self.usage.sm_busy_ns += (demand * r).min(self.capacity) * dt;
                self.usage.piece_ns += dt;
            }
        }
        self.now = now;
        Ok(())
    }

    /// Start a piece of `work` ns (alone, at full speed) and `demand` at `now`.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub fn start(
        &mut self,
        now: Ns,
        id: PieceId,
        work: Ns,
        demand: f64,
    ) -> Result<(), SharingError> {
        if !(demand > 0.0 && demand <= 1.0) {
            return Err(SharingError::BadDemand(format!("{demand}")));
        }
        if let Some(p) = &self.piece {
            return Err(if p.id == id {
                SharingError::Duplicate(id)
            } else {
                SharingError::Occupied(p.id)
            });
        }
        self.advance(now)?;
        self.piece = Some(Piece { id, finish_v: self.v + work as f64, demand });
        Ok(())
    }

    /// Take the piece off at `now`; the work it still had, ns at full speed.
    pub fn remove(&mut self, now: Ns, id: PieceId) -> Result<Ns, SharingError> {
        self.advance(now)?;
        match self.piece {
            Some(p) if p.id == id => {
                self.piece = None;
                Ok((p.finish_v - self.v).max(0.0).round() as Ns)
            }
            _ => Err(SharingError::Unknown(id)),
        }
    }

    /// When the piece finishes, rounded up to whole nanoseconds; `None` when idle.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub fn next_finish(&self) -> Option<(Ns, PieceId)> {
        let p = self.piece.as_ref()?;
        Some((self.now + finish_wait((p.finish_v - self.v) / self.rate()), p.id))
    }

    /// Move to `now` and take the piece if it finished by then.
    #[inline]
    pub fn pop_finished(&mut self, now: Ns) -> Result<Option<PieceId>, SharingError> {
        self.advance(now)?;
        match self.piece {
            Some(p) if p.finish_v <= self.v + FINISH_TOLERANCE => {
                self.piece = None;
                Ok(Some(p.id))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharing::{SharedGpu, Sharing};
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Start { id: PieceId, work: Ns, demand_milli: u16 },
        Remove(PieceId),
        Pop,
        Advance,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..4, 0u64..50_000_000_000, 0u16..=1100)
                .prop_map(|(id, work, demand_milli)| Op::Start { id, work, demand_milli }),
            (0u64..4).prop_map(Op::Remove),
            Just(Op::Pop),
            Just(Op::Advance),
        ]
    }

    proptest! {
        /// Driven with the same operations at the same times, the exclusive model gives
        /// every answer the shared model in exclusive mode gives, and the same usage to
        /// the last bit: a run's results cannot move when the simulator switches.
        #[test]
        fn answers_as_the_shared_model_in_exclusive_mode_does(
            capacity_milli in 1u32..=1000,
            ops in proptest::collection::vec((op(), 0u64..3_000_000_000), 1..200),
        ) {
            let capacity = f64::from(capacity_milli) / 1000.0;
            let mut shared = SharedGpu::with_capacity(Sharing::Exclusive, capacity);
            let mut exclusive = ExclusiveGpu::with_capacity(capacity);
            // its twin without usage gives every other answer alike
            let mut bare = ExclusiveGpu::with_capacity(capacity).without_usage();
            let mut now: Ns = 0;
            for (op, step) in ops {
                // sometimes exactly at the predicted finish, as the engine wakes
                now = match (step % 3, shared.next_finish()) {
                    (0, Some((at, _))) if at >= now => at,
                    _ => now + step,
                };
                match op {
                    Op::Start { id, work, demand_milli } => {
                        let demand = f64::from(demand_milli) / 1000.0;
                        let answer = exclusive.start(now, id, work, demand);
                        prop_assert_eq!(&bare.start(now, id, work, demand), &answer);
                        prop_assert_eq!(shared.start(now, id, work, demand), answer);
                    }
                    Op::Remove(id) => {
                        let answer = exclusive.remove(now, id);
                        prop_assert_eq!(&bare.remove(now, id), &answer);
                        prop_assert_eq!(shared.remove(now, id), answer);
                    }
                    Op::Pop => {
                        let answer = exclusive.pop_finished(now);
                        prop_assert_eq!(&bare.pop_finished(now), &answer);
                        prop_assert_eq!(shared.pop_finished(now), answer);
                    }
                    Op::Advance => {
                        let answer = exclusive.advance(now);
                        prop_assert_eq!(&bare.advance(now), &answer);
                        prop_assert_eq!(shared.advance(now), answer);
                    }
                }
                prop_assert_eq!(shared.next_finish(), exclusive.next_finish());
                prop_assert_eq!(bare.next_finish(), exclusive.next_finish());
                prop_assert_eq!((bare.is_empty(), bare.now()), (exclusive.is_empty(), exclusive.now()));
                prop_assert_eq!(bare.v.to_bits(), exclusive.v.to_bits());
                prop_assert_eq!(bare.usage(), Usage::default());
                prop_assert_eq!(shared.is_empty(), exclusive.is_empty());
                prop_assert_eq!(shared.now(), exclusive.now());
                let (a, b) = (shared.usage(), exclusive.usage());
                prop_assert_eq!(a.busy_ns.to_bits(), b.busy_ns.to_bits());
                prop_assert_eq!(a.sm_busy_ns.to_bits(), b.sm_busy_ns.to_bits());
                prop_assert_eq!(a.piece_ns.to_bits(), b.piece_ns.to_bits());
                for band in 0..3 {
                    prop_assert_eq!(a.load_ns[band].to_bits(), b.load_ns[band].to_bits());
                }
            }
        }
    }
}
