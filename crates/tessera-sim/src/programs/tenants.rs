//! The program engine's tenants starting and ending, and the policy's side: its
//! events delivered, its actions applied (see the module above).

use super::*;

impl ProgramSim {
    // ---- starting and ending

    /// Register thread `i` with the policy as started now.
    pub(super) fn register(&mut self, i: usize) -> Result<(), SimError> {
        let t = &mut self.threads[i];
        t.admitted = true;
        t.blocked = false;
        t.started = self.now;
        // its first round begins now (a sleep share counts from here)
        t.round_start = self.now;
        // what it declares: its largest allocation
        let memory = t
            .phases
            .iter()
            .filter_map(|p| match p {
                Phase::Alloc(b) => Some(*b),
                _ => None,
            })
            .max()
            .unwrap_or(Bytes(0))
            .max(self.declared[i]);
        let spec = TenantSpec {
            weight: t.weight as u32,
            priority: t.priority,
            memory,
            ..TenantSpec::new(TenantId(i as u64), ServiceClass::Batch)
        };
        self.retick(self.threads[i].core);
        self.deliver(Event::TenantRegistered(spec))
    }

    /// Pinned tenant `i` arrives on its core. CFS places a new thread at its queue's
    /// least `vruntime`, not at 0, which would let it win every pick until it first
    /// blocks; it preempts the running thread only as a woken one would.
    pub(super) fn arrive(&mut self, i: usize) -> Result<(), SimError> {
        self.move_to_an_idle_core(i);
        let core = self.threads[i].core;
        self.settle(core);
        let floor = self.least_vruntime(core, i);
        self.register(i)?;
        if floor.is_finite() {
            self.threads[i].vruntime = floor;
        }
        self.maybe_preempt(core, i)
    }

    /// One tenant per core: start waiting tenants, in order, on free cores.
    pub(super) fn admit(&mut self) -> Result<(), SimError> {
        if self.model.admission != Admission::OnePerCore {
            return Ok(());
        }
        loop {
            let held = |c: usize, ts: &[Thread]| {
                ts.iter().any(|t| t.admitted && t.ended.is_none() && t.core == c)
            };
            let Some(core) = (0..self.cores.len()).find(|c| !held(*c, &self.threads)) else {
                return Ok(());
            };
            let Some(i) = self.threads.iter().position(|t| !t.admitted) else { return Ok(()) };
            let old = std::mem::replace(&mut self.threads[i].core, core);
            if let Some(c) = self.on_core.get_mut(old) {
                c.retain(|j| *j != i);
            }
            let here = &mut self.on_core[core];
            let at = here.partition_point(|j| *j < i);
            here.insert(at, i);
            self.retick(old);
            self.register(i)?;
            self.repick(core)?;
        }
    }

    /// Thread `i` ran its last round: it leaves (its memory with it) and frees its core.
    pub(super) fn end_program(&mut self, i: usize) -> Result<(), SimError> {
        let core = self.threads[i].core;
        let t = &mut self.threads[i];
        t.ended = Some(self.now);
        t.blocked = true;
        let held = std::mem::replace(&mut t.held, Bytes(0));
        self.memory_used.0 -= held.0;
        self.unfinished -= 1;
        self.changed = true;
        self.deliver(Event::TenantLeft { tenant: TenantId(i as u64) })?;
        self.switch_to(core, self.pick(core))?;
        self.admit()
    }

    // ---- the policy

    /// The policy granted a memory request: its thread holds the memory and goes on.
    pub(super) fn memory_granted(&mut self, request: MemRequestId) -> Result<(), SimError> {
        let Some(&i) = self.request_owner.get(request.0 as usize) else {
            return Err(self.violation(format!("grant of unknown request {request}")));
        };
        let t = &mut self.threads[i];
        let (Some(Wait::Memory { request: r, granted: false }), Some(Phase::Alloc(bytes))) =
            (t.wait, t.phases.get(t.pc).copied())
        else {
            return Err(self.violation(format!("grant of {request}, which does not wait")));
        };
        if r != request {
            return Err(self.violation(format!("grant of {request}, which does not wait")));
        }
        t.wait = Some(Wait::Memory { request, granted: true });
        t.held.0 += bytes.0;
        t.memory_wait_ns += (self.now - t.wait_since).0;
        self.memory_used.0 += bytes.0;
        self.changed = true;
        if self.memory_used > self.model.gpu_memory {
            return Err(self.violation(format!(
                "granted {} of {} bytes",
                self.memory_used.0, self.model.gpu_memory.0
            )));
        }
        self.wait_may_be_over(i)
    }

    pub(super) fn deliver(&mut self, event: Event) -> Result<(), SimError> {
        let mut actions = std::mem::take(&mut self.actions);
        self.policy.on_event(self.now, &event, &mut actions);
        self.actions = actions;
        self.apply_pending()
    }

    pub(super) fn apply_pending(&mut self) -> Result<(), SimError> {
        // actions may cause events whose answers queue behind these
        let pending = std::mem::take(&mut self.actions);
        for action in pending {
            match action {
                Action::Dispatch { task, placement } if self.policy_places().is_some() => {
                    self.place_kernel(task, placement)?;
                }
                Action::Dispatch { task, placement } => self.dispatched(task, placement)?,
                Action::Migrate { tenant, from, to } if self.policy_places().is_some() => {
                    let Some(cost) = self.policy_places() else { continue };
                    self.migrate(tenant, from, to, cost)?;
                }
                Action::SetStreamPriority { tenant, raised } if self.policy_places().is_some() => {
                    let Some(r) = self.raised.get_mut(tenant.0 as usize) else {
                        return Err(self.violation(format!("stream priority of unknown {tenant}")));
                    };
                    // kernels already dispatched keep theirs, as on the task engine
                    *r = raised;
                }
                Action::EndQuantum { task } => {
                    if self.online.as_ref().is_some_and(|o| o.task == task) {
                        self.end_quantum()?;
                    }
                }
                Action::SetPools { .. } => {}
                Action::GrantMemory { request } => self.memory_granted(request)?,
                Action::DenyMemory { request, reason } => {
                    return Err(self.violation(format!(
                        "memory request {request} denied ({reason:?}) though it waits forever"
                    )));
                }
                other => {
                    let refusal = Event::ActionRefused {
                        action: Box::new(other),
                        reason: "not modelled by the program engine".into(),
                    };
                    self.deliver(refusal)?;
                }
            }
        }
        Ok(())
    }
}
