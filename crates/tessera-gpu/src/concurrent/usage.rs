//! What the block model integrates over time ([`ConcurrentUsage`]), kept exact.

use super::*;

impl ConcurrentGpu {
    /// Busy times so far.
    pub fn usage(&self) -> ConcurrentUsage {
        let u = &self.usage;
        let ns = |ps: u128| ps as f64 / PS_PER_NS as f64;
        let sms = f64::from(self.limits.sms);
        ConcurrentUsage {
            busy_ns: ns(u.busy),
            sm_busy_ns: ns(u.sm_busy) / sms,
            thread_busy_ns: ns(u.thread_busy) / (f64::from(self.limits.max_threads_per_sm) * sms),
            switching_ns: ns(u.switching),
            kernel_ns: ns(u.kernels),
            load_ns: u.load.map(ns),
        }
    }

    pub(super) fn account(&mut self, to: Ps) {
        if to <= self.now || self.paused {
            return;
        }
        let dt = u128::from(to - self.now);
        self.usage.kernels += dt * self.kernels.len() as u128;
        let band = if self.demand_present > 1.0 + 1e-9 {
            2
        } else if self.demand_present >= 0.5 - 1e-9 {
            1
        } else {
            0
        };
        self.usage.load[band] += dt;
        if self.sms_in_use > 0 {
            self.usage.busy += dt;
            self.usage.sm_busy += dt * u128::from(self.sms_in_use);
            self.usage.thread_busy += dt * u128::from(self.threads_in_use);
        }
        if self.switching.is_some() {
            self.usage.switching += dt;
        }
    }
}
