//! Estimators of task durations.

use crate::units::Nanos;

/// Mean of the last `k` samples (Flexy's le(t): "the average execution time of the
/// last k tasks", Flexy §II-C1). A ring of `k` slots and a running sum: a push is a
/// store and two additions (it runs on every task's end, issue 55).
#[derive(Clone, Debug)]
pub struct WindowMean {
    ring: Box<[Nanos]>,
    /// The slot the next sample goes to.
    next: usize,
    len: usize,
    sum: u128,
}

impl WindowMean {
    /// A window over the last `k` samples; `k` is at least 1.
    pub fn new(k: usize) -> WindowMean {
        WindowMean { ring: vec![Nanos::ZERO; k.max(1)].into(), next: 0, len: 0, sum: 0 }
    }

    /// Add a sample, dropping the oldest once the window is full.
    pub fn push(&mut self, sample: Nanos) {
        let full = self.len == self.ring.len();
        let slot = &mut self.ring[self.next];
        if full {
            self.sum -= u128::from(slot.0);
        } else {
            self.len += 1;
        }
        *slot = sample;
        self.sum += u128::from(sample.0);
        self.next += 1;
        if self.next == self.ring.len() {
            self.next = 0;
        }
    }

    /// The mean of the samples in the window, or `None` before the first sample.
    pub fn mean(&self) -> Option<Nanos> {
        if self.len == 0 {
            None
        } else if let Ok(sum) = u64::try_from(self.sum) {
            // a u64 division where the sum fits (always, for durations under ~58 years
            // summed over a window): a u128 one is a library call
            Some(Nanos(sum / self.len as u64))
        } else {
            Some(Nanos((self.sum / self.len as u128) as u64))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The ring gives the mean of the last k samples, whatever k and the samples.
        #[test]
        fn the_ring_is_the_mean_of_the_last_k(
            k in 1usize..12,
            samples in proptest::collection::vec(0u64..u64::MAX / 4, 0..40),
        ) {
            let mut m = WindowMean::new(k);
            for (i, s) in samples.iter().enumerate() {
                m.push(Nanos(*s));
                let last = &samples[(i + 1).saturating_sub(k)..=i];
                let sum: u128 = last.iter().map(|&x| u128::from(x)).sum();
                proptest::prop_assert_eq!(m.mean(), Some(Nanos((sum / last.len() as u128) as u64)));
            }
        }
    }

    #[test]
    fn window_mean_forgets_old_samples() {
        let mut m = WindowMean::new(3);
        assert_eq!(m.mean(), None);
        for s in [10, 20, 30] {
            m.push(Nanos(s));
        }
        assert_eq!(m.mean(), Some(Nanos(20)));
        m.push(Nanos(60));
        assert_eq!(m.mean(), Some(Nanos((20 + 30 + 60) / 3)));
    }
}
