//! Jobs and their tasks through the engine: arrivals, CPU phases, submissions, a
//! task's end on its slot, and a job's completion.

use super::*;

impl Simulation<'_> {
    pub(super) fn job_arrives(&mut self, i: usize) -> Fallible {
        let job = &self.workload.jobs[i];
        self.deliver(&Event::TenantRegistered(job.tenant.clone()))?;
        if job.submission == Submission::Open {
            if !job.tasks.is_empty() {
                // its first request at its arrival, the next when its time comes
                self.open_arrival(i)?;
            }
        } else {
            for _ in 0..job.window.max(1) {
                if job.submission == Submission::Window {
                    self.after_cpu_phase(i)?;
                } else {
                    self.submit_next(i)?;
                }
            }
        }
        if job.tasks.is_empty() || (job.background && self.foreground_left == 0) {
            self.deliver(&Event::TenantLeft { tenant: job.tenant.id })?;
        }
        Ok(())
    }

    /// Submit an open-loop job's next request and schedule the one after it.
    pub(super) fn open_arrival(&mut self, i: usize) -> Fallible {
        self.submit_next(i)?;
        let job = &self.workload.jobs[i];
        let next = self.jobs[i].next_task as usize;
        if next < job.tasks.len() {
            let at = job.arrivals.get(next).copied().unwrap_or(self.now).max(self.now);
            self.schedule(at, SimEvent::NextArrival(i as u32));
        }
        Ok(())
    }

    /// Submit `job`'s next task once its kernel's CPU phase has run (at once without
    /// one). The CPU phase runs on a core of its own: CPU contention is not modelled
    /// here (the program engine models it).
    fn after_cpu_phase(&mut self, job: usize) -> Fallible {
        let state = &self.jobs[job];
        let cpu = state.cpu;
        if cpu == Nanos::ZERO {
            return self.submit_next(job);
        }
        if state.next_task < state.tasks {
            self.schedule(self.now + cpu, SimEvent::CpuPhaseEnds(job as u32));
            self.cpu_phases.0 += 1;
            self.cpu_phases.1 = self.cpu_phases.1.max(self.cpu_phases.0);
        }
        Ok(())
    }

    pub(super) fn submit_next(&mut self, job_index: usize) -> Fallible {
        let state = &mut self.jobs[job_index];
        if state.next_task >= state.tasks || (state.background && self.foreground_left == 0) {
            return Ok(());
        }
        let next = state.next_task as usize;
        let k = next % AHEAD;
        if k == 0 {
            let tasks = &self.workload.jobs[job_index].tasks[next..];
            let n = tasks.len().min(AHEAD);
            state.ahead[..n].copy_from_slice(&tasks[..n]);
        }
        let work = state.ahead[k];
        state.next_task += 1;
        let (launch, tenant, kernel, demand) =
            (state.launch(), state.tenant, state.kernel, state.demand());
        let id = TaskId(self.tasks.len() as u64);
        if u32::try_from(id.0).is_err() {
            // (a queued event holds a task's index in 32 bits: `SimEvent`)
            return Err(Box::new(SimError::TooLarge(format!("{id}: more than 2^32 tasks"))));
        }
        self.tasks.push(TaskState {
            record: TaskRecord::new(job_index, work, self.now),
            demand,
            location: Location::Waiting,
        });
        self.tasks_open += 1;
        let spec =
            TaskSpec { launch, batch: 1, id, tenant, kernel, memory: tessera_core::Bytes(0) };
        self.deliver_plain(Event::TaskSubmitted(spec))
    }

    /// The model of `slot` said `task` (fluid model) or something (block model) ends
    /// now: every kernel finished by now ends.
    pub(super) fn task_ends(
        &mut self,
        slot: usize,
        task: Option<TaskId>,
        generation: u32,
    ) -> Fallible {
        if self.slots[slot].generation != generation {
            // killed by a reset or a migration, or (sharing) superseded by a later
            // prediction
            return Ok(());
        }
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        let gpu = self.slots[slot].placement.gpu;
        // every piece due now, one at a time (no allocation on this hot path); several
        // may end at one instant when shared, taken in the model's order
        let mut ended = 0;
        loop {
            let s = &mut self.slots[slot];
            let id = match s.model.pop_finished(self.now.0) {
                Ok(Some(id)) => id,
                Ok(None) => break,
                Err(e) => return Err(self.violation(format!("{gpu}: {e}"))),
            };
            if exclusive && (task.is_some_and(|t| t.0 != id) || !s.model.is_empty()) {
                return Err(self.violation(format!(
                    "{task:?} ended on {gpu} but the GPU model finished task {id}"
                )));
            }
            let finished = TaskId(id);
            let Some(i) = s.running.iter().position(|(t, _)| *t == finished) else {
                return Err(
                    self.violation(format!("{finished} finished on {gpu} but was not running"))
                );
            };
            let (_, started) = s.running.swap_remove(i);
            let placement = s.placement;
            let ran_for = self.now - started;
            let kernel_time = self.kernel_time(finished, ran_for);
            self.gpus[gpu.0 as usize].busy += kernel_time;
            ended += 1;
            let batch = if self.batches.is_empty() { None } else { self.batches.remove(&finished) };
            match batch {
                // every request of a batch completes with its execution
                Some(members) => {
                    for m in &members {
                        self.left_gpu(gpu, *m);
                    }
                    for m in members {
                        self.task_done(placement, m, ran_for)?;
                    }
                }
                None => {
                    self.left_gpu(gpu, finished);
                    self.task_done(placement, finished, ran_for)?;
                }
            }
            if exclusive {
                // its model was found empty above, and a task the policy dispatched
                // here meanwhile runs at least a nanosecond (`PerfModel::exec_time`):
                // nothing else is due, and a second pop would only say so
                break;
            }
        }
        if ended == 0
            && let Some(task) = task
        {
            return Err(
                self.violation(format!("{task} ended on {gpu} but the GPU model had nothing due"))
            );
        }
        if !exclusive {
            // The event is handled: nothing touches the slot before the next queued
            // event, so the block model's changes before then that finish nothing run
            // here rather than as events of their own (each would be popped, end
            // nothing and be predicted again).
            let horizon = self.next_event_at();
            if let Err(e) = self.slots[slot].model.run_until_a_finish(horizon.0) {
                return Err(self.violation(format!("{gpu}: {e}")));
            }
            // the remaining tasks' finishes moved: predict again
            self.predict_next(slot);
        }
        Ok(())
    }

    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    fn task_done(&mut self, placement: Placement, task: TaskId, ran_for: Nanos) -> Fallible {
        self.end_task(task, TaskEnd::Done)?;
        let job = self.tasks[task.0 as usize].record.job();
        self.deliver_plain(Event::TaskFinished {
            task,
            placement,
            ran_for,
            measured: true,
            result: Ok(()),
        })?;
        match self.jobs[job].submission {
            Submission::Window => self.after_cpu_phase(job)?,
            Submission::Burst if self.jobs[job].outstanding() == 0 => {
                for _ in 0..self.workload.jobs[job].window.max(1) {
                    self.submit_next(job)?;
                }
            }
            Submission::Burst | Submission::Open => {}
        }
        self.maybe_job_done(job)
    }

    #[inline(always)]
    pub(super) fn end_task(&mut self, task: TaskId, end: TaskEnd) -> Fallible {
        let now = self.now;
        match self.tasks.get(task.0 as usize) {
            None => return Err(self.violation(format!("ended unknown {task}"))),
            Some(s) if s.record.end().is_some() => {
                return Err(self.violation(format!("{task} ended twice")));
            }
            Some(_) => {}
        }
        let state = &mut self.tasks[task.0 as usize];
        state.record.ended(now, end);
        state.location = Location::Ended;
        let job = &mut self.jobs[state.record.job()];
        job.ended += 1;
        if !job.background {
            self.foreground_left -= 1;
        }
        self.tasks_open -= 1;
        Ok(())
    }

    #[inline(always)]
    pub(super) fn maybe_job_done(&mut self, job: usize) -> Fallible {
        let state = &self.jobs[job];
        let background_over =
            state.background && self.foreground_left == 0 && state.outstanding() == 0;
        if state.ended == state.tasks || background_over {
            let tenant: TenantId = self.workload.jobs[job].tenant.id;
            self.deliver(&Event::TenantLeft { tenant })?;
        }
        Ok(())
    }
}
