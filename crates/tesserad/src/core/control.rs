//! Control requests (the socket's JSON requests): registration, memory, weights, jobs, status; closing tenants.

use super::*;

impl Core {
    pub(super) fn gc_tenant(&mut self, tenant: TenantId) {
        if self.tenants.get(&tenant).is_some_and(|t| !t.open && t.tasks == 0) {
            let gone = self.tenants.remove(&tenant);
            if let (Some(m), Some(l)) = (&self.metrics, gone.and_then(|t| t.labels)) {
                m.forget(&l);
            }
            if let Some(inf) = &self.inference {
                inf.forget(tenant);
            }
        }
    }

    pub(super) fn close_tenant(&mut self, tenant: TenantId) {
        if let Some(t) = self.tenants.get_mut(&tenant)
            && t.open
        {
            t.open = false;
            if let Some(desk) = &self.desk {
                desk.close(tenant.0);
            }
            for g in std::mem::take(&mut t.placed) {
                if let Some(rt) = self.gpus.get_mut(g as usize) {
                    rt.placed = rt.placed.saturating_sub(1);
                }
            }
            if let Some(u) = self.uid_use.get_mut(&t.uid) {
                u.tenants = u.tenants.saturating_sub(1);
            }
            if let Some(c) = self.conns.get_mut(&t.conn) {
                c.tenants.remove(&tenant);
            }
            let job = t.job;
            let departed = crate::events::NodeEvent::Departed {
                tenant: tenant.0,
                done: t.done,
                not_done: t.not_done,
                waited_ms: t.waiting.0 as f64 / 1e6,
                gpu_ms: t.gpu_time.0 as f64 / 1e6,
            };
            let uid = t.uid;
            self.log(Some(uid), departed);
            self.deliver(Event::TenantLeft { tenant });
            if let Some(j) = job.and_then(|j| self.jobs.get_mut(&j)) {
                j.tenants.remove(&tenant);
                self.retry_parked();
            }
        }
        self.gc_tenant(tenant);
    }

    /// A control request was refused: logged and counted.
    pub(super) fn refused(
        &self,
        uid: u32,
        pid: u32,
        request: &'static str,
        code: ErrorCode,
        message: &str,
    ) {
        if let Some(m) = &self.metrics {
            m.refusals.get_or_create(&crate::metrics::reason(code)).inc();
        }
        // a status query refused is no decision about a tenant's fate
        if request != "status" {
            self.log(
                Some(uid),
                crate::events::NodeEvent::Refused {
                    pid,
                    request,
                    code,
                    reason: message.to_string(),
                },
            );
        }
    }

    pub(super) fn control(
        &mut self,
        conn: ConnId,
        pid: u32,
        uid: u32,
        request: tessera_client::proto::Request,
    ) -> Reply {
        use tessera_client::proto::Request;
        let err = |code, message: String| Reply::Error { code, message };
        match request {
            Request::Hello { .. }
            | Request::Ping
            | Request::Reserve { .. }
            | Request::ReserveContext { .. }
            | Request::Unreserve { .. }
            | Request::MemoryInfo { .. }
            | Request::KeepLedgerRecord { .. }
            | Request::Adopt { .. }
            // answered when its task ends (Core::run_task_over_socket)
            | Request::RunTask { .. } => {
                err(ErrorCode::BadRequest, "handled by the connection".into())
            }
            Request::Status { tenant, uid: of_uid, gpu, offset, limit, events } => {
                Reply::Status(Box::new(
                    self.status(
                        uid,
                        StatusQuery { tenant, uid: of_uid, gpu, offset, limit, events },
                    ),
                ))
            }
            Request::Register {
                class,
                sla_ms,
                weight,
                priority,
                memory,
                gpus,
                model,
                job,
                visible,
                migratable,
                token,
            } => {
                if self.draining {
                    return err(ErrorCode::ShuttingDown, "the daemon is shutting down".into());
                }
                if !self.conns.contains_key(&conn) {
                    return err(ErrorCode::BadRequest, "send hello before registering".into());
                }
                // a Kubernetes container's process enters its allocation by the token
                // alone, whatever job its environment names
                let job = match &token {
                    Some(t) => match self.pod_of(t) {
                        Some(id) if !self.may_enter_pod(id, pid) => {
                            return err(
                                ErrorCode::Forbidden,
                                "this allocation's token (TESSERA_TOKEN) is in use by another \
                                 container's processes: a token enters its own container's only"
                                    .into(),
                            );
                        }
                        Some(id) => Some(id),
                        None => {
                            return err(
                                ErrorCode::Forbidden,
                                "no allocation on this node has this token (TESSERA_TOKEN): \
                                 its pod ended, or the token was not given here"
                                    .into(),
                            );
                        }
                    },
                    None => job,
                };
                // a container's processes share its allocation as they go: what one
                // declares (its environment's TESSERA_MEMORY) is not held against the
                // others, and the allocation's memory bounds them all
                let memory = if token.is_some() { 0 } else { memory };
                // within a job, the weight asked for shares the job's among its tenants
                let weight_in_group = weight.clamp(1, 1000);
                // a Slurm job's tenant: the job's class, weight and GPUs, within its
                // memory entitlement, for the job's own uid only
                let (class, sla_ms, weight, job_gpus) = match job {
                    None if self.limits.require_token_in_containers
                        && super::pods::in_a_container(pid) =>
                    {
                        return err(
                            ErrorCode::Forbidden,
                            "a container's processes register with their allocation's token \
                             (TESSERA_TOKEN, which the device plugin sets): this one has none"
                                .into(),
                        );
                    }
                    None if self.limits.slurm.require_job
                        && uid != 0
                        && uid != self.daemon_uid
                        && !self.limits.user_facing_uids.contains(&uid) =>
                    {
                        return err(
                            ErrorCode::Forbidden,
                            "this node's GPUs are Slurm's: register under your job \
                             (TESSERA_SLURM_JOB, set by the job's TaskProlog)"
                                .into(),
                        );
                    }
                    None => (class, sla_ms, weight, None),
                    Some(_) if self.models_only => {
                        return err(
                            ErrorCode::BadRequest,
                            "Slurm jobs are not served in the gpulets inference mode".into(),
                        );
                    }
                    Some(j) => {
                        let Some(jb) = self.jobs.get(&j) else {
                            return err(
                                ErrorCode::UnknownTenant,
                                format!(
                                    "no Slurm job {j} on this node (its Prolog did not reach \
                                     this daemon, or it ended)"
                                ),
                            );
                        };
                        match jb.token {
                            // found by the token above; a job id alone does not enter it
                            Some(_) if token.is_none() => {
                                return err(
                                    ErrorCode::Forbidden,
                                    format!(
                                        "job {j} is a Kubernetes container's allocation: \
                                         entered with its token only"
                                    ),
                                );
                            }
                            Some(_) => {}
                            None if uid != jb.grant.uid => {
                                return err(
                                    ErrorCode::Forbidden,
                                    format!(
                                        "Slurm job {j} belongs to uid {}, not {uid}",
                                        jb.grant.uid
                                    ),
                                );
                            }
                            None => {}
                        }
                        let declared = self.job_declared(j);
                        if declared.saturating_add(memory) > jb.memory_entitled {
                            return err(
                                ErrorCode::NoCapacity,
                                format!(
                                    "Slurm job {j}'s {} shard(s) entitle it to {} bytes of GPU \
                                     memory; its tenants declared {declared}, this one asks \
                                     {memory}",
                                    jb.weight, jb.memory_entitled
                                ),
                            );
                        }
                        (jb.class, jb.sla_ms, jb.weight, Some(jb.grant.gpus.clone()))
                    }
                };
                let class = match class {
                    TenantClass::UserFacing if sla_ms == 0 || sla_ms > 86_400_000 => {
                        return err(
                            ErrorCode::BadRequest,
                            "a user-facing tenant needs 0 < sla_ms <= 86400000 (a day)".into(),
                        );
                    }
                    TenantClass::UserFacing => {
                        ServiceClass::UserFacing { sla: Nanos::from_millis(sla_ms) }
                    }
                    TenantClass::Batch => ServiceClass::Batch,
                };
                if self.gpus.iter().all(|g| memory > g.memory) {
                    return err(
                        ErrorCode::NoCapacity,
                        format!("{memory} bytes exceed every GPU's memory"),
                    );
                }
                match (&self.inference, &model) {
                    (None, Some(_)) => {
                        return err(
                            ErrorCode::BadRequest,
                            "this daemon serves no models (its policy is neither gpulets nor \
                             node, or it runs real GPUs, where partitions are not built yet)"
                                .into(),
                        );
                    }
                    (Some(_), None) if self.models_only => {
                        return err(
                            ErrorCode::BadRequest,
                            "this daemon serves inference models (policy gpulets): register \
                             with a model"
                                .into(),
                        );
                    }
                    (Some(_), Some(_)) if !class.is_user_facing() => {
                        return err(
                            ErrorCode::BadRequest,
                            "a model is user-facing: its sla_ms is its SLO".into(),
                        );
                    }
                    (Some(inf), Some(m)) => {
                        if let Err(e) = inf.check(&m.name, &m.profile, sla_ms as f64) {
                            return err(ErrorCode::BadRequest, e.to_string());
                        }
                    }
                    (_, None) => {}
                }
                if class.is_user_facing()
                    && job.is_none()
                    && uid != 0
                    && uid != self.daemon_uid
                    && !self.limits.user_facing_uids.contains(&uid)
                {
                    return err(
                        ErrorCode::Forbidden,
                        format!("uid {uid} may register batch tenants only (user_facing_uids)"),
                    );
                }
                let open_here = self.conns.get(&conn).map_or(0, |c| c.tenants.len());
                if open_here >= self.limits.max_tenants_per_conn as usize {
                    return err(
                        ErrorCode::NoCapacity,
                        format!(
                            "a connection may have {} open tenants (max_tenants_per_conn)",
                            self.limits.max_tenants_per_conn
                        ),
                    );
                }
                // the GPUs the program can see (its CUDA_VISIBLE_DEVICES); a job's
                // tenant has the job's
                let within = match visible.filter(|_| job_gpus.is_none()) {
                    None => None,
                    Some(v) => match self.visible_gpus(&v) {
                        Ok(w) => Some(w),
                        Err(e) => return err(ErrorCode::BadRequest, e),
                    },
                };
                let usage = self.uid_use.entry(uid).or_default();
                if usage.tenants >= self.limits.max_tenants_per_uid {
                    return err(
                        ErrorCode::NoCapacity,
                        format!(
                            "uid {uid} has {} open tenants (max_tenants_per_uid)",
                            usage.tenants
                        ),
                    );
                }
                usage.tenants += 1;
                let id = TenantId(self.next_tenant);
                self.next_tenant += 1;
                let placed = match job_gpus {
                    Some(gs) => {
                        for g in &gs {
                            if let Some(rt) = self.gpus.get_mut(*g as usize) {
                                rt.placed += 1;
                            }
                        }
                        gs
                    }
                    None => self.place(gpus as usize, within.as_deref()),
                };
                let class_name = if class.is_user_facing() { "user_facing" } else { "batch" };
                let labels =
                    self.metrics.as_ref().map(|m| m.labels_for(id.0, uid, pid, job, class_name));
                self.tenants.insert(
                    id,
                    TenantInfo {
                        conn,
                        uid,
                        labels,
                        class,
                        open: true,
                        tasks: 0,
                        queued: 0,
                        done: 0,
                        met: 0,
                        not_done: 0,
                        placed: placed.clone(),
                        demand: None,
                        gpu_time: Nanos::ZERO,
                        declared: memory,
                        job,
                        weight: weight.max(1),
                        waiting: Nanos::ZERO,
                    },
                );
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tenants.insert(id);
                }
                if let Some(desk) = &self.desk {
                    let region = self.conns.get(&conn).map(|c| c.region.clone());
                    let entitlement = job.and_then(|j| {
                        self.jobs.get(&j).map(|jb| crate::memory::Entitlement {
                            job: j,
                            total: jb.memory_entitled,
                            per_gpu: jb.memory_per_gpu.clone(),
                        })
                    });
                    // a migratable program may be moved to any GPU it may see
                    let may_use = match (&within, migratable && job.is_none()) {
                        (_, false) => placed.clone(),
                        (Some(w), true) => w.clone(),
                        (None, true) => Vec::new(),
                    };
                    desk.open(id.0, uid, pid, memory, may_use, region, entitlement);
                }
                if let Some(j) = job.and_then(|j| self.jobs.get_mut(&j)) {
                    j.tenants.insert(id);
                }
                if let (Some(inf), Some(m)) = (&self.inference, model) {
                    inf.admit(
                        id,
                        crate::inference::ServedModel {
                            name: m.name,
                            profile: m.profile,
                            slo_ms: sla_ms as f64,
                        },
                    );
                }
                self.deliver(Event::TenantRegistered(TenantSpec {
                    id,
                    class,
                    weight: weight.max(1),
                    priority,
                    memory: Bytes(memory),
                    // a Slurm job's tenant runs only on the job's GPUs
                    gpus: if job.is_some() {
                        placed.iter().map(|g| GpuId(*g)).collect()
                    } else {
                        Vec::new()
                    },
                    // a job's tenants share the job's weight (its shards)
                    group: job,
                    weight_in_group,
                }));
                // a policy that gives each tenant one GPU (DCUDA) places it: its
                // program must run where the policy grants its slices
                let home = if job.is_none() { self.policy.home(id) } else { None };
                let placed = match (home, placed.as_slice()) {
                    (Some(home), [only]) if home.0 != *only => {
                        self.gpus[*only as usize].placed -= 1;
                        if let Some(g) = self.gpus.get_mut(home.0 as usize) {
                            g.placed += 1;
                        }
                        if let Some(t) = self.tenants.get_mut(&id) {
                            t.placed = vec![home.0];
                        }
                        if let Some(desk) = &self.desk
                            && !migratable
                        {
                            desk.place(id.0, vec![home.0]);
                        }
                        vec![home.0]
                    }
                    _ => placed,
                };
                let uuids = placed
                    .iter()
                    .map(|g| self.gpus.get(*g as usize).and_then(|rt| rt.uuid.clone()))
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default();
                self.log(
                    Some(uid),
                    crate::events::NodeEvent::Admitted {
                        tenant: id.0,
                        pid,
                        class: class_name,
                        sla_ms: class.is_user_facing().then_some(sla_ms),
                        weight: weight.max(1),
                        job,
                        gpus: placed.clone(),
                    },
                );
                Reply::Registered { tenant: id.0, gpus: placed, uuids, pid }
            }
            Request::SetWeight { tenant, weight } => {
                let id = TenantId(tenant);
                if !self.tenants.get(&id).is_some_and(|t| t.conn == conn && t.open) {
                    return err(
                        ErrorCode::UnknownTenant,
                        format!("tenant {tenant} is not one of this connection's"),
                    );
                }
                if !(1..=1000).contains(&weight) {
                    return err(
                        ErrorCode::BadRequest,
                        format!("weight must be 1..=1000, got {weight}"),
                    );
                }
                if let Some(j) = self.tenants.get(&id).and_then(|t| t.job) {
                    return err(
                        ErrorCode::Forbidden,
                        format!("tenant {tenant}'s weight is Slurm job {j}'s shards"),
                    );
                }
                if let Some(t) = self.tenants.get_mut(&id) {
                    t.weight = weight;
                }
                self.deliver(Event::TenantWeightChanged { tenant: id, weight });
                Reply::WeightSet { tenant, weight }
            }
            Request::JobStart(grant) => {
                if let Some(refusal) = self.unless_admin(uid, pid, "start Slurm jobs") {
                    return refusal;
                }
                if let Some(why) = &self.limits.slurm_refusal {
                    return err(ErrorCode::BadRequest, why.clone());
                }
                if let Some(j) = self.jobs.get(&grant.job) {
                    // a Prolog run twice reports the same grant: the same answer
                    if j.grant == grant {
                        return Reply::Job(j.report(self.job_declared(grant.job), 0));
                    }
                    // a job id reused (a requeued job) whose earlier run's Epilog never
                    // reached us: replaced if nothing of it is open
                    if !j.tenants.is_empty() {
                        let e = crate::slurm::SlurmError::Conflict(grant.job);
                        return err(ErrorCode::BadRequest, e.to_string());
                    }
                    self.jobs.remove(&grant.job);
                }
                if self.jobs.len() >= crate::slurm::MAX_JOBS {
                    let e = crate::slurm::SlurmError::TooMany(self.jobs.len());
                    return err(ErrorCode::NoCapacity, e.to_string());
                }
                let memory: Vec<u64> = self.gpus.iter().map(|g| g.memory).collect();
                match crate::slurm::Job::new(grant, &memory, &self.limits.slurm) {
                    Ok(j) => {
                        self.log(
                            Some(j.grant.uid),
                            crate::events::NodeEvent::JobGranted {
                                job: j.grant.job,
                                gpus: j.grant.gpus.clone(),
                                shards: j.grant.shards,
                            },
                        );
                        let report = j.report(0, 0);
                        self.jobs.insert(j.grant.job, j);
                        Reply::Job(report)
                    }
                    Err(e) => err(ErrorCode::BadRequest, e.to_string()),
                }
            }
            Request::JobEnd { job } => {
                if let Some(refusal) = self.unless_admin(uid, pid, "end Slurm jobs") {
                    return refusal;
                }
                self.end_job(job)
            }
            Request::PodStart(grant) => self.pod_start(uid, pid, grant),
            Request::PodEnd { token } => self.pod_end(uid, pid, token),
            Request::JobInfo { job } => match self.jobs.get(&job) {
                Some(j) if uid == 0 || uid == self.daemon_uid || uid == j.grant.uid => {
                    let waiting = self.parked_for(job) as u32;
                    Reply::Job(j.report(self.job_declared(job), waiting))
                }
                Some(_) => err(ErrorCode::Forbidden, format!("Slurm job {job} is not uid {uid}'s")),
                None => err(ErrorCode::UnknownTenant, format!("no Slurm job {job} on this node")),
            },
            Request::Close { tenant } => {
                let id = TenantId(tenant);
                if !self.tenants.get(&id).is_some_and(|t| t.conn == conn && t.open) {
                    return err(
                        ErrorCode::UnknownTenant,
                        format!("tenant {tenant} is not one of this connection's"),
                    );
                }
                self.close_tenant(id);
                Reply::Closed { tenant }
            }
        }
    }
}
