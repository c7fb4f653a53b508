//! The engine's pending events in (time, sequence) order, from three sources merged
//! at each pop: a binary heap of what the run schedules ([`MinHeap`]), the one pending
//! tick, and the jobs' arrivals, which are known before the run starts and so are kept
//! as a sorted list read from its front. On Flexy's workloads the arrivals were nine in
//! ten of the heap's entries (its mean length 41 to 49 on 4 GPUs), so every push and
//! pop of a task's end walked a heap ten times longer than the events in flight
//! (issue 55). The order of events is exactly the one heap's would be: every entry
//! carries the sequence number it was scheduled with, and ties go by it.

use super::SimEvent;
use crate::min_heap::{MinHeap, Timed};
use tessera_core::Nanos;

/// A heap entry: 32 bytes, moved whole by the sifts.
type Entry = Timed<SimEvent>;

#[derive(Debug, Default)]
pub(super) struct EventQueue {
    heap: MinHeap<Entry>,
    /// The next tick (time, sequence number): at most one is ever pending.
    tick: Option<(Nanos, u64)>,
    /// Job arrivals as (time, sequence number, job), sorted; those before `next` have
    /// been popped.
    arrivals: Vec<(Nanos, u64, usize)>,
    next: usize,
    seq: u64,
}

/// Which source holds the earliest event.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Heap,
    Tick,
    Arrival,
}

impl EventQueue {
    /// A queue holding the arrivals of jobs at these times, in job order (sequence
    /// numbers 0, 1, ... as if each had been scheduled in turn).
    pub(super) fn with_arrivals(times: impl IntoIterator<Item = Nanos>) -> EventQueue {
        let mut arrivals: Vec<(Nanos, u64, usize)> =
            times.into_iter().enumerate().map(|(job, at)| (at, job as u64, job)).collect();
        // sequence numbers are distinct: the sort is by (time, sequence)
        arrivals.sort_unstable();
        let seq = arrivals.len() as u64;
        EventQueue { arrivals, seq, ..EventQueue::default() }
    }

    pub(super) fn schedule(&mut self, at: Nanos, event: SimEvent) {
        if matches!(event, SimEvent::Tick) {
            self.tick = Some((at, self.seq));
        } else {
            self.heap.push(Entry { at, seq: self.seq, what: event });
        }
        self.seq += 1;
    }

    /// The source of the earliest pending event, ticks included or not.
    fn first(&self, with_tick: bool) -> Option<(Nanos, u64, Source)> {
        let mut best = self.heap.peek().map(|e| (e.at, e.seq, Source::Heap));
        let mut take = |cand: Option<(Nanos, u64, Source)>| {
            if let Some(c) = cand
                && best.is_none_or(|b| (c.0, c.1) < (b.0, b.1))
            {
                best = Some(c);
            }
        };
        take(self.arrivals.get(self.next).map(|&(at, seq, _)| (at, seq, Source::Arrival)));
        if with_tick {
            take(self.tick.map(|(at, seq)| (at, seq, Source::Tick)));
        }
        best
    }

    /// The earliest pending event.
    pub(super) fn pop(&mut self) -> Option<(Nanos, SimEvent)> {
        // the heap alone once every job has arrived and no tick is pending: most pops
        // of a run without ticks
        if self.tick.is_none() && self.next == self.arrivals.len() {
            return self.heap.pop().map(|e| (e.at, e.what));
        }
        match self.first(true)?.2 {
            Source::Heap => self.heap.pop().map(|e| (e.at, e.what)),
            Source::Tick => self.tick.take().map(|(at, _)| (at, SimEvent::Tick)),
            Source::Arrival => {
                let (at, _, job) = self.arrivals[self.next];
                self.next += 1;
                Some((at, SimEvent::JobArrives(job as u32)))
            }
        }
    }

    /// When the earliest pending event is due, the tick included or not (stale
    /// predictions count, which only brings it earlier); `Nanos::MAX` when none is.
    pub(super) fn next_at(&self, with_tick: bool) -> Nanos {
        self.first(with_tick).map_or(Nanos(u64::MAX), |(at, _, _)| at)
    }

    /// Events waiting in the heap and the tick: the queue an event's push and pop
    /// walk (the arrivals' list is read from its front, whatever its length).
    pub(super) fn len(&self) -> usize {
        self.heap.len() + usize::from(self.tick.is_some())
    }

    /// When the pending tick is due.
    pub(super) fn tick_at(&self) -> Option<Nanos> {
        self.tick.map(|(at, _)| at)
    }

    /// Pass over `k` ticks of `period` as if each had been delivered and the next
    /// scheduled: the tick pending is the last of them plus one period, with the
    /// sequence number the last would have taken.
    pub(super) fn skip_ticks(&mut self, k: u64, period: Nanos) {
        let Some((at, _)) = self.tick else { return };
        self.seq += k;
        self.tick = Some((Nanos(at.0 + k * period.0), self.seq - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    proptest! {
        /// Whatever the arrivals, pushes and ticks, events come out in the order one
        /// heap of everything would give them.
        #[test]
        fn pops_in_one_heaps_order(
            arrivals in proptest::collection::vec(0u64..50, 0..20),
            ops in proptest::collection::vec((0u8..3, 0u64..50), 0..200),
        ) {
            let mut q = EventQueue::with_arrivals(arrivals.iter().map(|a| Nanos(*a)));
            let mut model: BinaryHeap<Reverse<(Nanos, u64, SimEvent)>> = arrivals
                .iter()
                .enumerate()
                .map(|(i, a)| Reverse((Nanos(*a), i as u64, SimEvent::JobArrives(i as u32))))
                .collect();
            let mut seq = arrivals.len() as u64;
            let mut model_tick: Option<u64> = None;
            for (op, at) in ops {
                match op {
                    0 => {
                        q.schedule(Nanos(at), SimEvent::NextArrival(at as u32));
                        model.push(Reverse((Nanos(at), seq, SimEvent::NextArrival(at as u32))));
                    }
                    1 => {
                        q.schedule(Nanos(at), SimEvent::Tick);
                        // a new tick replaces the pending one
                        if let Some(old) = model_tick.take() {
                            model.retain(|Reverse((_, s, _))| *s != old);
                        }
                        model.push(Reverse((Nanos(at), seq, SimEvent::Tick)));
                        model_tick = Some(seq);
                    }
                    _ => {
                        let expected = model.pop().map(|Reverse((at, s, e))| {
                            if model_tick == Some(s) { model_tick = None; }
                            (at, e)
                        });
                        let next = q.next_at(true);
                        prop_assert_eq!(next, expected.map_or(Nanos(u64::MAX), |(at, _)| at));
                        prop_assert_eq!(q.pop(), expected);
                        continue;
                    }
                }
                seq += 1;
            }
            while let Some(Reverse((at, s, e))) = model.pop() {
                if model_tick == Some(s) { model_tick = None; }
                prop_assert_eq!(q.pop(), Some((at, e)));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }
}
