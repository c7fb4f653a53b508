//! Slurm jobs' registrations that wait for their memory entitlement (parked).

use super::*;

impl Core {
    /// Registrations parked for job `job`'s memory.
    pub(super) fn parked_for(&self, job: u64) -> usize {
        self.parked.iter().filter(|p| p.job == job).count()
    }

    /// Memory the open tenants of job `job` declared.
    pub(super) fn job_declared(&self, job: u64) -> u64 {
        self.jobs.get(&job).map_or(0, |j| {
            j.tenants.iter().filter_map(|t| self.tenants.get(t)).map(|t| t.declared).sum()
        })
    }

    /// A registration that must wait for room in its job's entitlement: one under a
    /// job of this uid, over what the job has left but within the whole entitlement,
    /// with `over_entitlement = "wait"`.
    pub(super) fn must_wait(
        &self,
        conn: ConnId,
        uid: u32,
        request: &tessera_client::proto::Request,
    ) -> Option<u64> {
        if !self.conns.contains_key(&conn) {
            return None; // no session: refused with a reason, never parked
        }
        let tessera_client::proto::Request::Register { job: Some(job), memory, .. } = request
        else {
            return None;
        };
        let j = self.jobs.get(job)?;
        // a registration that will be refused anyway is answered now
        if self.draining {
            return None;
        }
        (self.limits.slurm.over_entitlement == crate::config::OverEntitlement::Wait
            && j.grant.uid == uid
            && *memory <= j.memory_entitled
            && self.job_declared(*job).saturating_add(*memory) > j.memory_entitled)
            .then_some(*job)
    }

    /// Answer the parked registrations that now fit (or whose job ended).
    pub(super) fn retry_parked(&mut self) {
        for p in std::mem::take(&mut self.parked) {
            if !self.conns.get(&p.conn).is_some_and(|c| c.alive) {
                continue;
            }
            if !self.draining
                && self.jobs.contains_key(&p.job)
                && self.must_wait(p.conn, p.uid, &p.request).is_some()
            {
                self.parked.push(p);
                continue;
            }
            let reply = self.control(p.conn, p.pid, p.uid, p.request);
            p.reply.send(reply);
        }
    }
}
