//! What is measured of one GPU while work runs on it, one meter for both engines (the
//! task engine's GPUs and the program engine's block device placed by a policy): the
//! time with anything running (NVSMI's busy time, a union of the runs), and the
//! tenants resident beyond the first, integrated over time (co-located app-seconds).

use tessera_core::Nanos;

/// One GPU's meter. Residents are whoever the engine counts (a job, a program's
/// thread), each with how many of its pieces run here.
#[derive(Clone, Debug, Default)]
pub(crate) struct GpuMeter {
    /// Pieces running here.
    active: usize,
    active_since: Nanos,
    /// Time with at least one piece running, up to the last time none was.
    busy_union: Nanos,
    /// Residents and their running pieces.
    resident: Vec<(usize, u32)>,
    /// Integral of the residents beyond the first, resident-ns, up to `resident_since`.
    extra_app_ns: u128,
    resident_since: Nanos,
}

impl GpuMeter {
    /// A piece started running.
    #[inline]
    pub(crate) fn started(&mut self, now: Nanos) {
        if self.active == 0 {
            self.active_since = now;
        }
        self.active += 1;
    }

    /// A piece stopped running.
    #[inline]
    pub(crate) fn stopped(&mut self, now: Nanos) {
        self.active -= 1;
        if self.active == 0 {
            self.busy_union += now - self.active_since;
        }
    }

    /// A piece of `who` started running: whether `who` became resident.
    #[inline]
    pub(crate) fn joined(&mut self, now: Nanos, who: usize) -> bool {
        match self.resident.iter_mut().find(|(w, _)| *w == who) {
            Some((_, n)) => {
                *n += 1;
                false
            }
            None => {
                self.settle(now);
                self.resident.push((who, 1));
                true
            }
        }
    }

    /// A piece of `who` stopped running: whether `who` is no longer resident.
    #[inline]
    pub(crate) fn left(&mut self, now: Nanos, who: usize) -> bool {
        let Some(i) = self.resident.iter().position(|(w, _)| *w == who) else { return false };
        self.resident[i].1 -= 1;
        if self.resident[i].1 > 0 {
            return false;
        }
        self.settle(now);
        self.resident.swap_remove(i);
        true
    }

    /// Integrate the residency up to `now`, before it changes (or to read it).
    pub(crate) fn settle(&mut self, now: Nanos) {
        let extra = self.resident.len().saturating_sub(1) as u128;
        self.extra_app_ns += extra * u128::from((now - self.resident_since).0);
        self.resident_since = now;
    }

    /// Pieces running now.
    pub(crate) fn active(&self) -> usize {
        self.active
    }

    /// Residents now.
    pub(crate) fn residents(&self) -> usize {
        self.resident.len()
    }

    /// Whether `who` is resident.
    pub(crate) fn is_resident(&self, who: usize) -> bool {
        self.resident.iter().any(|(w, _)| *w == who)
    }

    /// Busy time up to the last moment nothing ran.
    pub(crate) fn busy_union(&self) -> Nanos {
        self.busy_union
    }

    /// Busy time up to `now`, a run still going counted.
    pub(crate) fn busy_until(&self, now: Nanos) -> Nanos {
        if self.active > 0 { self.busy_union + (now - self.active_since) } else { self.busy_union }
    }

    /// Resident-ns beyond the first, up to the last [`GpuMeter::settle`].
    pub(crate) fn extra_app_ns(&self) -> u128 {
        self.extra_app_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed: A runs 0-10 ms, B 5-20 ms (two pieces of B 5-8 ms): busy 20 ms,
    /// two residents 5-10 ms, so 5 ms of one resident beyond the first.
    #[test]
    fn busy_is_a_union_and_co_residence_is_integrated() {
        let ms = Nanos::from_millis;
        let mut m = GpuMeter::default();
        m.started(ms(0));
        assert!(m.joined(ms(0), 0));
        m.started(ms(5));
        assert!(m.joined(ms(5), 1));
        m.started(ms(5));
        assert!(!m.joined(ms(5), 1), "already resident");
        m.stopped(ms(8));
        assert!(!m.left(ms(8), 1), "one piece of B still runs");
        m.stopped(ms(10));
        assert!(m.left(ms(10), 0));
        assert_eq!(m.busy_until(ms(15)), ms(15));
        m.stopped(ms(20));
        assert!(m.left(ms(20), 1));
        assert_eq!((m.active(), m.residents()), (0, 0));
        assert_eq!(m.busy_union(), ms(20));
        m.settle(ms(30));
        assert_eq!(m.extra_app_ns(), 5_000_000);
    }
}
