//! Slurm jobs' registrations that wait for their memory entitlement (parked).

use super::*;

impl Core {
    /// The refusal of a request only root and the daemon's user may make (starting and
    /// ending Slurm jobs and pod allocations), for any other `uid`; `what` says what it
    /// was ("start Slurm jobs"). On a Kubernetes node (`require_token_in_containers`),
    /// also for a process `pid` in a container's pid namespace: a container's root is
    /// uid 0 too, and the daemon's socket is mounted into every container with a share.
    pub(super) fn unless_admin(&self, uid: u32, pid: u32, what: &str) -> Option<Reply> {
        if uid != 0 && uid != self.daemon_uid {
            return Some(Reply::Error {
                code: ErrorCode::Forbidden,
                message: format!("only root or the daemon's user {what}, not uid {uid}"),
            });
        }
        (self.limits.require_token_in_containers && super::pods::in_a_container(pid)).then(|| {
            Reply::Error {
                code: ErrorCode::Forbidden,
                message: format!(
                    "only the node's root or the daemon's user {what}, not a container's \
                     (a process in another pid namespace than the daemon's)"
                ),
            }
        })
    }

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
        let tessera_client::proto::Request::Register { job, token, memory, .. } = request else {
            return None;
        };
        // a pod's process is in its allocation by its token (checked here); a Slurm
        // job's by its uid (below)
        let job = &match token {
            Some(t) => self.pod_of(t)?,
            None => (*job)?,
        };
        let j = self.jobs.get(job)?;
        // a registration that will be refused anyway is answered now
        if self.draining {
            return None;
        }
        (self.limits.slurm.over_entitlement == crate::config::OverEntitlement::Wait
            && (if j.token.is_some() { token.is_some() } else { j.grant.uid == uid })
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

    /// End job `job` (a Slurm job's Epilog, or a pod allocation's end): every tenant
    /// of it is closed, its queued tasks cancelled and its running ones stopped, its
    /// parked registrations refused.
    pub(super) fn end_job(&mut self, job: u64) -> Reply {
        // an Epilog may run for a job whose Prolog never reached us: nothing to do
        // taken out first: closing its tenants must not let a parked
        // registration into a job that is ending
        let Some(j) = self.jobs.remove(&job) else {
            return Reply::JobEnded { job, tenants_closed: 0 };
        };
        let tenants: Vec<TenantId> = j.tenants.iter().copied().collect();
        // every task of the job still running: its open tenants', and those of
        // tenants that closed earlier (their clients left; `departed_running =
        // "finish"` let them run on) — nothing of a job outlives it
        let running: Vec<(TaskId, ConnId, u64, bool)> = self
            .tasks
            .iter()
            .filter(|(_, x)| x.started.is_some())
            .filter(|(_, x)| self.tenants.get(&x.tenant).is_some_and(|t| t.job == Some(job)))
            .map(|(id, x)| (*id, x.conn, x.seq, j.tenants.contains(&x.tenant)))
            .collect();
        // queued tasks end with TenantLeft, first: a running task stopped first
        // would let the next queued one start
        for t in &tenants {
            self.close_tenant(*t);
        }
        for (task, conn, seq, open) in running {
            // answered here only if it was still running (not ended or requeued
            // meanwhile) and an open tenant's client waits: every task once
            if self.cancel_running(task) && open && self.conns.get(&conn).is_some_and(|c| c.alive) {
                self.respond(
                    conn,
                    ResponseDesc {
                        seq,
                        status: status::CANCELLED,
                        reason: reason::TENANT_CLOSED,
                        gpu: u32::MAX,
                        ..Default::default()
                    },
                );
            }
        }
        // registrations still waiting for this job's memory are refused
        self.retry_parked();
        self.log(Some(j.grant.uid), crate::events::NodeEvent::JobEnded { job });
        Reply::JobEnded { job, tenants_closed: tenants.len() as u32 }
    }
}
