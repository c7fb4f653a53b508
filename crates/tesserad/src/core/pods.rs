//! Kubernetes containers' allocations (`PodStart`, `PodEnd`): jobs entered by a token
//! ([`crate::pods`]).

use super::*;
use crate::pods::PodError;
use tessera_client::pod::{PodGrant, Token};

impl Core {
    /// The job of the pod allocation whose token is `token`.
    pub(super) fn pod_of(&self, token: &Token) -> Option<u64> {
        self.jobs
            .range(crate::pods::POD_IDS..)
            .find(|(_, j)| j.token.is_some_and(|t| t.matches(token)))
            .map(|(id, _)| *id)
    }

    /// Whether the process `pid` may enter the pod allocation `id` by its token: while
    /// any of the allocation's processes is open, only from their pid namespace (a
    /// container's own; a restarted container, with a new one, enters once the old
    /// one's processes are gone). Unreadable namespaces compare as themselves: a
    /// daemon that cannot see `/proc` falls back to the token alone.
    pub(super) fn may_enter_pod(&mut self, id: u64, pid: u32) -> bool {
        let ns = pid_namespace(pid);
        let Some(j) = self.jobs.get_mut(&id) else { return false };
        if !j.tenants.is_empty() {
            return j.pid_namespace == ns;
        }
        j.pid_namespace = ns;
        true
    }

    pub(super) fn pod_start(&mut self, uid: u32, pid: u32, grant: PodGrant) -> Reply {
        if let Some(refusal) = self.unless_admin(uid, pid, "allocate for pods") {
            return refusal;
        }
        if let Some(why) = &self.limits.slurm_refusal {
            // what keeps a Slurm job's tenants together keeps a pod's
            return refused(ErrorCode::BadRequest, why.clone());
        }
        if let Some(id) = self.pod_of(&grant.token) {
            if !self.jobs[&id].is_pod(&grant) {
                return refused(ErrorCode::BadRequest, PodError::Conflict.to_string());
            }
            if !(1..=1000).contains(&grant.weight) {
                return refused(
                    ErrorCode::BadRequest,
                    PodError::BadWeight(grant.weight).to_string(),
                );
            }
            // the plugin's retry, its restart rebuilding what it gave, or the weight it
            // learned from the pod's namespace once the kubelet listed the pod (after
            // `Allocate`, so its processes may be running already)
            self.reweight_pod(id, grant.weight, grant.name);
            let j = &self.jobs[&id];
            return Reply::Job(j.report(self.job_declared(id), self.parked_for(id) as u32));
        }
        // the daemon's own check of what the plugin's units promise: a GPU's pod
        // allocations never hold more than its memory
        let held: u64 = self
            .jobs
            .range(crate::pods::POD_IDS..)
            .filter(|(_, j)| j.grant.gpus == [grant.gpu])
            .map(|(_, j)| j.memory_entitled)
            .sum();
        if let Some(g) = self.gpus.get(grant.gpu as usize)
            && held.saturating_add(grant.memory) > g.memory
        {
            let e = PodError::Full { gpu: grant.gpu, memory: grant.memory, held, has: g.memory };
            return refused(ErrorCode::NoCapacity, e.to_string());
        }
        if self.jobs.len() >= crate::slurm::MAX_JOBS {
            let e = crate::slurm::SlurmError::TooMany(self.jobs.len());
            return refused(ErrorCode::NoCapacity, e.to_string());
        }
        let id = self
            .jobs
            .range(crate::pods::POD_IDS..)
            .next_back()
            .map_or(crate::pods::POD_IDS, |(id, _)| id + 1);
        let memory: Vec<u64> = self.gpus.iter().map(|g| g.memory).collect();
        match crate::slurm::Job::pod(&grant, id, &memory) {
            Ok(j) => {
                self.log(
                    None,
                    crate::events::NodeEvent::JobGranted {
                        job: id,
                        gpus: vec![grant.gpu],
                        shards: 0,
                    },
                );
                let report = j.report(0, 0);
                self.jobs.insert(id, j);
                Reply::Job(report)
            }
            Err(e) => refused(ErrorCode::BadRequest, e.to_string()),
        }
    }

    /// A pod allocation's weight (and name) changed: its job's, and every open tenant's
    /// from its next quantum on.
    fn reweight_pod(&mut self, id: u64, weight: u32, name: String) {
        let Some(j) = self.jobs.get_mut(&id) else { return };
        j.grant.comment = name;
        if j.weight == weight {
            return;
        }
        j.weight = weight;
        let tenants: Vec<TenantId> = j.tenants.iter().copied().collect();
        for t in tenants {
            if let Some(tn) = self.tenants.get_mut(&t) {
                tn.weight = weight;
            }
            // the job's tenants are queued as one group: each carries its weight
            self.deliver(Event::TenantWeightChanged { tenant: t, weight });
        }
    }

    pub(super) fn pod_end(&mut self, uid: u32, pid: u32, token: Token) -> Reply {
        if let Some(refusal) = self.unless_admin(uid, pid, "end pod allocations") {
            return refusal;
        }
        match self.pod_of(&token) {
            Some(id) => self.end_job(id),
            // a pod whose allocation never reached us, or ended already: nothing to do
            None => Reply::JobEnded { job: 0, tenants_closed: 0 },
        }
    }
}

/// The pid namespace of the process `pid` (`pid:[INODE]`), `None` where `/proc` does
/// not say.
pub(super) fn pid_namespace(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok().map(|l| l.to_string_lossy().into_owned())
}

/// Whether the process `pid` (in the daemon's pid namespace, as `SO_PEERCRED` gives
/// it) lives in another pid namespace than the daemon: a container's. One whose
/// namespace cannot be read (it is gone, or `/proc` hides it) counts as a container's:
/// the check fails closed.
pub(super) fn in_a_container(pid: u32) -> bool {
    pid_namespace(pid) != pid_namespace(std::process::id())
}

fn refused(code: ErrorCode, message: String) -> Reply {
    Reply::Error { code, message }
}
