//! The ring data plane: polling the clients' request rings, answering on their response rings, refusing and disconnecting misbehaving clients.

use super::*;

/// The sequence numbers of tasks run over the socket: far above any a ring uses.
pub(super) const SOCKET_SEQ: u64 = 1 << 62;

impl Core {
    pub(super) fn poll_rings(&mut self) -> bool {
        let mut worked = false;
        let now = Instant::now();
        let (awake, asleep) = (self.awake_state(), self.asleep_state());
        if awake != daemon_state::BUSY {
            // pinned beside a client that spins again on a quiet host, the core could
            // not answer until that spin gave up (measured: 55 us echoes)
            self.follow.before_sleep(false);
        }
        // by index: a ring may leave the list as it goes quiet
        let mut i = 0;
        while let Some((conn, region, last)) = self.active.get(i) {
            if !region.has_requests() {
                if now.duration_since(*last) > ACTIVE {
                    // quiet: its client rings its doorbell with its next request (the
                    // flag is set before the ring is looked at once more, so a request
                    // written meanwhile is seen now or rung for)
                    region.set_daemon_state(asleep);
                    if !region.has_requests() {
                        self.active.swap_remove(i);
                        continue;
                    }
                    region.set_daemon_state(awake);
                } else {
                    i += 1;
                    continue;
                }
            }
            let (conn, region) = (*conn, region.clone());
            self.active[i].2 = now;
            i += 1;
            if !region.requests_sane() || self.conns.get(&conn).is_some_and(|c| c.kicked.get()) {
                self.kick(conn, "its request ring's indices are impossible");
                continue;
            }
            // bounded per connection per pass, so one busy client cannot starve others
            for _ in 0..64 {
                let Some(req) = region.pop_request() else { break };
                worked = true;
                self.request(conn, &region, req);
            }
            if awake == daemon_state::BUSY {
                self.follow.serving = self.follow.serving.and(region.client_cpu());
            }
        }
        worked
    }

    /// A task over the socket (`RunTask`): submitted as the rings submit one, answered
    /// on the socket when it ends.
    pub(super) fn run_task_over_socket(
        &mut self,
        conn: ConnId,
        tenant: u64,
        cost_ns: u64,
        reply: crate::server::ReplyTo,
    ) {
        let Some(region) = self.conns.get(&conn).map(|c| c.region.clone()) else {
            reply.send(Reply::Error {
                code: ErrorCode::BadRequest,
                message: "send hello before running tasks".into(),
            });
            return;
        };
        let seq = SOCKET_SEQ | self.next_socket_seq;
        self.next_socket_seq += 1;
        self.socket_tasks.borrow_mut().insert((conn, seq), reply);
        let d = RequestDesc { seq, op: op::SUBMIT, tenant, cost_ns, ..Default::default() };
        self.request(conn, &region, d);
    }

    pub(super) fn respond(&self, conn: ConnId, r: ResponseDesc) {
        if r.seq & SOCKET_SEQ != 0 {
            if let Some(reply) = self.socket_tasks.borrow_mut().remove(&(conn, r.seq)) {
                reply.send(Reply::TaskDone { status: r.status, reason: r.reason, gpu: r.gpu });
            }
            return;
        }
        if let Some(c) = self.conns.get(&conn).filter(|c| c.alive && !c.kicked.get())
            && !c.region.push_response(&r)
        {
            // the ring has room for every task the protocol allows in flight: a full
            // one means the client broke the protocol (or its indices)
            self.kick(conn, "its response ring is full or its indices are impossible");
        }
    }

    /// Close a client's connection for breaking the ring protocol; logged once, and
    /// everything it registered ends as for any disconnect.
    pub(super) fn kick(&self, conn: ConnId, why: &str) {
        let Some(c) = self.conns.get(&conn) else { return };
        if c.kicked.replace(true) {
            return;
        }
        tracing::warn!(
            conn,
            pid = c.pid,
            uid = c.uid,
            why,
            "disconnecting a client that broke the ring protocol"
        );
        self.connections.kick(conn);
    }

    pub(super) fn reject(&self, conn: ConnId, seq: u64, why: u32) {
        self.respond(
            conn,
            ResponseDesc {
                seq,
                status: status::FAILED,
                reason: why,
                gpu: u32::MAX,
                ..Default::default()
            },
        );
    }

    pub(super) fn request(&mut self, conn: ConnId, region: &Region, d: RequestDesc) {
        match d.op {
            op::ECHO => {
                let _ = region.push_response(&ResponseDesc {
                    seq: d.seq,
                    status: status::ECHO,
                    gpu: u32::MAX,
                    ..Default::default()
                });
            }
            op::CANCEL => {
                if let Some(task) = self.by_seq.get(&(conn, d.seq)).copied() {
                    self.deliver(Event::TaskCancelRequested { task });
                }
            }
            op::RELEASE => {
                // a running slice of this connection ends early; anything else (a task,
                // a queued or unknown slice) is ignored, as a late release would be
                let Some(task) = self.by_seq.get(&(conn, d.seq)).copied() else { return };
                self.end_slice_early(task, Duration::from_nanos(d.cost_ns), d.kernel == 1);
            }
            op::SUBMIT | op::SLICE => {
                let slice = d.op == op::SLICE;
                let tenant = TenantId(d.tenant);
                let owned = self.tenants.get(&tenant).is_some_and(|t| t.conn == conn && t.open);
                if self.draining {
                    return self.respond(
                        conn,
                        ResponseDesc {
                            seq: d.seq,
                            status: status::CANCELLED,
                            reason: reason::SHUTDOWN,
                            gpu: u32::MAX,
                            ..Default::default()
                        },
                    );
                }
                if !owned {
                    return self.reject(conn, d.seq, reason::UNKNOWN_TENANT);
                }
                if slice {
                    // GPU time its gate measured after its last slice ended (a kernel
                    // that ran past it) is charged now, however late
                    self.charge_owed(tenant, conn);
                }
                if d.in_len > self.slot_bytes
                    || d.out_len > self.slot_bytes
                    || d.cost_ns > self.limits.max_task.0
                    || (slice && (d.in_len, d.out_len, d.memory) != (0, 0, 0))
                {
                    return self.reject(conn, d.seq, reason::BAD_REQUEST);
                }
                // the protocol allows `slots` tasks in flight; a client writing its
                // ring directly must not grow the daemon's tables without bound
                if self.conns.get(&conn).is_some_and(|c| c.tasks >= self.limits.slots as usize) {
                    return self.reject(conn, d.seq, reason::BAD_REQUEST);
                }
                if self.gpus.iter().all(|g| d.memory > g.memory) {
                    return self.reject(conn, d.seq, reason::UNSCHEDULABLE);
                }
                let uid = self.conns.get(&conn).map_or(u32::MAX, |c| c.uid);
                let usage = self.uid_use.entry(uid).or_default();
                if usage.tasks >= self.limits.max_tasks_per_uid
                    || usage.gpu + Nanos(d.cost_ns) > self.limits.max_gpu_per_uid
                {
                    return self.reject(conn, d.seq, reason::QUOTA);
                }
                usage.tasks += 1;
                usage.gpu += Nanos(d.cost_ns);
                let id = TaskId(self.next_task);
                self.next_task += 1;
                self.tasks.insert(
                    id,
                    TaskInfo {
                        conn,
                        uid,
                        seq: d.seq,
                        tenant,
                        work: Nanos(d.cost_ns),
                        memory: d.memory,
                        in_len: d.in_len,
                        out_len: d.out_len,
                        submitted: self.clock.now(),
                        started: None,
                        slice,
                        charged: 0,
                        slack: Nanos::ZERO,
                    },
                );
                self.by_seq.insert((conn, d.seq), id);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tasks += 1;
                }
                if let Some(t) = self.tenants.get_mut(&tenant) {
                    t.queued += 1;
                    t.tasks += 1;
                }
                // a slice carries its tenant's latest launch: its demand by the occupancy
                // arithmetic (DCUDA §3.2), on V100 limits until GPUs are described
                let launch = if slice {
                    LaunchFacts::unpack(d.launch_grid, d.launch_block).map(|f| {
                        let o = occupancy::occupancy(
                            &occupancy::Launch {
                                grid_blocks: f.grid_blocks,
                                threads_per_block: f.threads_per_block,
                                registers_per_thread: f.registers_per_thread,
                                shared_per_block: f.shared_per_block,
                            },
                            &occupancy::SmLimits::V100,
                        );
                        LaunchInfo {
                            grid_blocks: f.grid_blocks,
                            threads_per_block: f.threads_per_block,
                            demand: PerMille((o.demand * 1000.0).round() as u16),
                        }
                    })
                } else {
                    None
                };
                if let (Some(l), Some(t)) = (launch, self.tenants.get_mut(&tenant)) {
                    t.demand = Some(f64::from(l.demand.0) / 1000.0);
                }
                self.deliver(Event::TaskSubmitted(TaskSpec {
                    launch,
                    batch: 1,
                    id,
                    tenant,
                    kernel: d.kernel,
                    memory: Bytes(d.memory),
                }));
            }
            _ => self.reject(conn, d.seq, reason::BAD_REQUEST),
        }
    }
}
