//! What a run measured, taken at its end: each GPU's busy time, SM share, energy and
//! load bands, each job's end, the SLA met per window of submissions.

use super::*;

impl Simulation<'_> {
    /// Per-GPU measurements at the end of the run (`now`), over `span`.
    pub(super) fn gpu_measures(&mut self, span: Nanos) -> GpuMeasures {
        let now = self.now;
        let span_ns = span.0.max(1) as f64;
        let mut m = GpuMeasures {
            busy: Vec::new(),
            sm_weighted: Vec::new(),
            mean_running: Vec::new(),
            energy_j: Vec::new(),
            load_bands: Vec::new(),
            extra_app_s: Vec::new(),
            job_end_s: self.job_ends(),
            migrations: self.counts.migrations,
            migrations_failed: self.counts.migrations_failed,
            repartitions: self.counts.repartitions,
            power_changes: self.counts.power_changes,
            max_cpu_phases: self.cpu_phases.1,
        };
        for (i, g) in self.gpus.iter_mut().enumerate() {
            let mut sm = 0.0;
            let mut pieces = 0.0;
            for slot in self.slots.iter_mut().filter(|s| s.placement.gpu.0 as usize == i) {
                // every slot's clock is at or before the end; the usage is integrated
                let _ = slot.model.advance(now.0.max(slot.model.now()));
                let usage = slot.model.usage();
                sm += usage.sm_busy_ns;
                pieces += usage.piece_ns;
            }
            m.busy.push(g.meter.busy_union().0 as f64 / span_ns);
            m.sm_weighted.push(sm / span_ns);
            m.mean_running.push(pieces / span_ns);
            m.energy_j.push(g.energy.joules(now.0));
            let whole = self.slots[g.whole].model.usage();
            m.load_bands.push(whole.load_ns.map(|ns| ns / span_ns));
            g.meter.settle(now);
            m.extra_app_s.push(g.meter.extra_app_ns() as f64 / 1e9);
        }
        m
    }

    /// When each job's last task ended, seconds.
    fn job_ends(&self) -> Vec<Option<f64>> {
        let mut ends: Vec<Option<Nanos>> = vec![None; self.workload.jobs.len()];
        let mut open = vec![false; self.workload.jobs.len()];
        for t in self.tasks.iter().map(|t| &t.record) {
            match t.end() {
                Some((e, _)) => ends[t.job()] = Some(ends[t.job()].map_or(e, |x| x.max(e))),
                None => open[t.job()] = true,
            }
        }
        ends.iter()
            .zip(open)
            .map(|(e, o)| if o { None } else { e.map(|e| e.0 as f64 / 1e9) })
            .collect()
    }

    /// User-facing tasks done, and those that met their SLA, per `window` of
    /// submission time.
    pub(super) fn sla_windows(&self, window: Nanos) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for t in self.tasks.iter().map(|t| &t.record) {
            let (ServiceClass::UserFacing { sla }, Some((end, TaskEnd::Done))) =
                (self.jobs[t.job()].class, t.end())
            else {
                continue;
            };
            let w = (t.submitted.0 / window.0.max(1)) as usize;
            if out.len() <= w {
                out.resize(w + 1, (0, 0));
            }
            out[w].0 += 1;
            out[w].1 += u64::from(end - t.submitted <= sla);
        }
        out
    }
}
