//! Estimators of task durations.

use crate::units::Nanos;
use std::collections::VecDeque;

/// Mean of the last `k` samples (Flexy's le(t): "the average execution time of the
/// last k tasks", Flexy §II-C1).
#[derive(Clone, Debug)]
pub struct WindowMean {
    window: VecDeque<Nanos>,
    capacity: usize,
    sum: u128,
}

impl WindowMean {
    /// A window over the last `k` samples; `k` is at least 1.
    pub fn new(k: usize) -> WindowMean {
        let capacity = k.max(1);
        WindowMean { window: VecDeque::with_capacity(capacity), capacity, sum: 0 }
    }

    /// Add a sample, dropping the oldest once the window is full.
    pub fn push(&mut self, sample: Nanos) {
        if self.window.len() == self.capacity
            && let Some(old) = self.window.pop_front()
        {
            self.sum -= u128::from(old.0);
        }
        self.window.push_back(sample);
        self.sum += u128::from(sample.0);
    }

    /// The mean of the samples in the window, or `None` before the first sample.
    pub fn mean(&self) -> Option<Nanos> {
        if self.window.is_empty() {
            None
        } else {
            Some(Nanos((self.sum / self.window.len() as u128) as u64))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
