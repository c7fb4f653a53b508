//! What a run measured.

use serde::{Deserialize, Serialize};
use tessera_core::{Nanos, ServiceClass, TenantId};

/// How a task ended. (The reason a task failed or was cancelled is logged when it
/// happens, not kept: a record per task holding a string made each of them 120 bytes,
/// and dropping a run a walk of them all; issue 55.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// It ran to completion.
    Done,
    /// It could never run.
    Failed,
    /// The policy cancelled it.
    Cancelled,
    /// The policy dropped it: it could no longer meet its latency target (a violation
    /// of it, counted among the user-facing tasks).
    Dropped,
}

/// One task's life, as the engine recorded it (its tenant's class is its job's). Kept
/// small: a run keeps one per task (at 100x the bench's node, 320,000), so that their
/// table is memory a run reuses, not pages faulted in afresh by every run (issue 55:
/// at 120 bytes the table was above the allocator's 32 MiB of reuse, and faulting
/// its pages was a quarter of a run's time at 100x). Its times not yet known are held
/// as a time no run reaches rather than as options, 8 bytes each rather than 16, so
/// that the engine's state of a task, this record among it, is one cache line (issue
/// 55: at 100x each line of a task's state was a miss at its dispatch).
#[derive(Clone, Debug)]
pub struct TaskRecord {
    /// Index of its job in the workload.
    job: u32,
    /// How it ended, once it has.
    how: Option<TaskEnd>,
    /// Its true work on the reference GPU.
    pub work: Nanos,
    /// When it was submitted.
    pub submitted: Nanos,
    first_start: Nanos,
    last_start: Nanos,
    end_at: Nanos,
}

// (a record with the engine's 16 bytes of a task beside it fills a cache line)
const _: () = assert!(std::mem::size_of::<TaskRecord>() <= 48);

impl TaskRecord {
    /// A time not reached (a task not yet started or ended). A run's clock reaches it
    /// only if its time saturates, 584 years on (a debug assertion in
    /// [`TaskRecord::started`] checks that no task starts then).
    const NEVER: Nanos = Nanos(u64::MAX);

    /// A task of `job` with `work`, submitted at `submitted`, not yet started.
    pub fn new(job: usize, work: Nanos, submitted: Nanos) -> TaskRecord {
        TaskRecord {
            job: u32::try_from(job).expect("a workload holds fewer than 2^32 jobs"),
            how: None,
            work,
            submitted,
            first_start: Self::NEVER,
            last_start: Self::NEVER,
            end_at: Self::NEVER,
        }
    }

    /// Index of its job in the workload.
    #[inline]
    pub fn job(&self) -> usize {
        self.job as usize
    }

    /// `t`, unless it is [`TaskRecord::NEVER`].
    #[inline]
    fn known(t: Nanos) -> Option<Nanos> {
        (t != Self::NEVER).then_some(t)
    }

    /// When it first started.
    #[inline]
    pub fn first_start(&self) -> Option<Nanos> {
        Self::known(self.first_start)
    }

    /// When it last started (after any resets).
    #[inline]
    pub fn last_start(&self) -> Option<Nanos> {
        Self::known(self.last_start)
    }

    /// When and how it ended.
    #[inline]
    pub fn end(&self) -> Option<(Nanos, TaskEnd)> {
        self.how.map(|how| (self.end_at, how))
    }

    /// It started (again) at `now`.
    #[inline]
    pub fn started(&mut self, now: Nanos) {
        debug_assert!(now != Self::NEVER);
        if self.first_start == Self::NEVER {
            self.first_start = now;
        }
        self.last_start = now;
    }

    /// It ended at `now`, `how`.
    #[inline]
    pub fn ended(&mut self, now: Nanos, how: TaskEnd) {
        self.end_at = now;
        self.how = Some(how);
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The measurements of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    /// User-facing tasks that completed or were dropped.
    pub uf_tasks: usize,
    /// User-facing tasks dropped as unable to meet their SLA (each a violation); left
    /// out of the serialized form when none were, as in every experiment but gpu-lets'.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uf_dropped: usize,
    /// Fraction (0-1) of those user-facing tasks whose latency (submission to
    /// completion) was within their tenant's SLA (a dropped one never is).
    pub sla_met: f64,
    /// The same fraction with latency measured from when the task reached the head of
    /// its job's queue (every earlier task of its job had started, or its submission if
    /// later) to its completion: the time a job's own earlier tasks made it wait is
    /// not counted.
    #[serde(default)]
    pub sla_met_from_head: f64,
    /// Busy time over GPU time (NVSMI semantics: busy, not how much of the GPU), 0-1.
    pub utilization: f64,
    /// GPU resets.
    pub resets: u64,
    /// Batch tasks completed.
    pub batch_done: usize,
    /// Batch tasks submitted.
    pub batch_tasks: usize,
    /// Longest time a batch task waited between submission and its final start
    /// (includes runs lost to resets): the starvation check.
    pub batch_max_wait_s: f64,
    /// Tasks that did not complete (cancelled or failed).
    pub not_completed: usize,
    /// GPU time lost to work killed by resets, seconds.
    pub killed_work_s: f64,
    /// First arrival to last event, seconds.
    pub makespan_s: f64,
    /// Time-weighted mean size of the user-facing pool (0 for policies without pools).
    pub mean_user_pool: f64,
    /// Time-weighted mean minimum reservation K (varies only under F-PID).
    pub mean_k: f64,
    /// Events the engine processed.
    pub events: u64,
    /// Mean length of the engine's event queue when an event was taken from it, for
    /// a like-for-like floor in `tessera bench sim` (not part of the results files).
    #[serde(skip)]
    pub mean_queue_len: f64,
    /// Each completed user-facing task's latency in seconds, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub uf_latencies_s: Vec<f64>,
    /// The same latencies measured from the head of the job's queue
    /// ([`RunMetrics::sla_met_from_head`]), when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub uf_head_latencies_s: Vec<f64>,
    /// Per-GPU measurements, when the run asked for them
    /// ([`crate::engine::SimOptions::measure_gpus`]).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpus: Option<GpuMeasures>,
    /// Per window of submission time, when the run asked for them
    /// ([`crate::engine::SimOptions::sla_window`]): user-facing tasks done, and those
    /// that met their SLA.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub sla_windows: Vec<(u64, u64)>,
    /// Per user-facing tenant: its tasks, those answered late and those dropped (for a
    /// breakdown of who missed; not part of the results files).
    #[serde(skip)]
    pub uf_by_tenant: std::collections::BTreeMap<TenantId, SlaCounts>,
}

/// One user-facing tenant's tasks ([`RunMetrics::uf_by_tenant`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlaCounts {
    /// Tasks that ended done or dropped.
    pub tasks: usize,
    /// Done after their SLA.
    pub late: usize,
    /// Dropped.
    pub dropped: usize,
}

/// What each GPU did over a run. Two utilizations, because they differ a lot under
/// sharing: `busy` is NVSMI's "utilization" (the fraction of time anything ran, however
/// little of the GPU it used); `sm_weighted` is DCUDA's (the SM share in use,
/// integrated: a GPU running one task that occupies a quarter of its SMs is 100% busy
/// but 25% SM-weighted). Under exclusive use with whole-GPU tasks they are equal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuMeasures {
    /// NVSMI's busy fraction, per GPU, 0-1.
    pub busy: Vec<f64>,
    /// SM-share-weighted utilization (DCUDA §3.2), per GPU, 0-1.
    pub sm_weighted: Vec<f64>,
    /// Time-weighted mean number of tasks running, per GPU.
    pub mean_running: Vec<f64>,
    /// Energy, joules, per GPU (by the performance model's power model).
    pub energy_j: Vec<f64>,
    /// Share of the run each GPU's summed demand was below 50%, 50-100%, and above
    /// 100% of its capacity (DCUDA's Figure 10).
    #[serde(default)]
    pub load_bands: Vec<[f64; 3]>,
    /// Integral over the run of each GPU's applications beyond the first, app-seconds
    /// (with busy time, what an energy model needs; see `tessera_gpu::power`).
    #[serde(default)]
    pub extra_app_s: Vec<f64>,
    /// When each job's last task ended, seconds, per job (`None`: it did not end).
    #[serde(default)]
    pub job_end_s: Vec<Option<f64>>,
    /// Migrations started.
    pub migrations: u64,
    /// Migrations refused for lack of room on the target.
    pub migrations_failed: u64,
    /// Repartitions started.
    pub repartitions: u64,
    /// Power-state changes started.
    pub power_changes: u64,
    /// The most jobs in a CPU phase at once (each phase runs on a core of its own in
    /// the task engine: the cores a run needs for that to hold). Not serialized.
    #[serde(skip)]
    pub max_cpu_phases: usize,
}

impl GpuMeasures {
    /// Energy of the whole node, joules.
    pub fn total_energy_j(&self) -> f64 {
        self.energy_j.iter().sum()
    }
}

impl RunMetrics {
    /// Derive the metrics from the engine's records. `host_per_job`: each job's
    /// kernel's host part per task, which `busy` does not count; `tenant_of_job`: each
    /// job's tenant.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_records<'a>(
        tasks: impl IntoIterator<Item = &'a TaskRecord>,
        host_per_job: &[Nanos],
        tenant_of_job: &[TenantId],
        class_of_job: &[ServiceClass],
        busy: Vec<Nanos>,
        span: Nanos,
        resets: u64,
        events: u64,
        mean_user_pool: f64,
        mean_k: f64,
        keep_latencies: bool,
    ) -> RunMetrics {
        let mut uf_tasks = 0;
        let mut uf_dropped = 0;
        let mut uf_met = 0;
        let mut uf_met_from_head = 0;
        let mut head_latencies = Vec::new();
        // per job, the latest first start of its tasks so far (tasks are in submission
        // order, so a job's earlier tasks come first)
        // (one walk of the records for everything below: at 100x the bench's node they
        // are 25 MB, and each walk of them was a read of it all; issue 55)
        let mut earlier_started = vec![Nanos::ZERO; tenant_of_job.len()];
        // busy time of the final, completed runs; the rest of the busy time was spent on
        // runs that a reset killed
        let mut completed_busy = 0u64;
        let mut batch_done = 0;
        let mut batch_tasks = 0;
        let mut batch_max_wait = Nanos::ZERO;
        let mut not_completed = 0;
        let mut latencies = Vec::new();
        // counted per job, then summed per tenant (a map entry per task was a fortieth
        // of `sim flexy`: issue 55)
        let mut by_job = vec![SlaCounts::default(); tenant_of_job.len()];
        let mut count = |job: usize, late: bool, dropped: bool| {
            if let Some(c) = by_job.get_mut(job) {
                c.tasks += 1;
                c.late += usize::from(late);
                c.dropped += usize::from(dropped);
            }
        };
        for t in tasks {
            let job = t.job();
            if job >= earlier_started.len() {
                earlier_started.resize(job + 1, Nanos::ZERO);
            }
            let head = t.submitted.max(earlier_started[job]);
            // a task that never started (cancelled, failed) holds no one back
            earlier_started[job] = earlier_started[job].max(t.first_start().unwrap_or(Nanos::ZERO));
            let Some((end, how)) = t.end() else { continue };
            let done = how == TaskEnd::Done;
            if done && let Some(start) = t.last_start() {
                let host = host_per_job.get(job).copied().unwrap_or(Nanos::ZERO);
                completed_busy += (end - start - host).0;
            }
            if !done {
                not_completed += 1;
            }
            let Some(class) = class_of_job.get(job) else { continue };
            match *class {
                ServiceClass::UserFacing { .. } if how == TaskEnd::Dropped => {
                    uf_tasks += 1;
                    uf_dropped += 1;
                    count(job, false, true);
                }
                ServiceClass::UserFacing { sla } => {
                    if done {
                        uf_tasks += 1;
                        let latency = end - t.submitted;
                        if latency <= sla {
                            uf_met += 1;
                        }
                        count(job, latency > sla, false);
                        let from_head = end - head;
                        if from_head <= sla {
                            uf_met_from_head += 1;
                        }
                        if keep_latencies {
                            latencies.push(latency.as_secs_f64());
                            head_latencies.push(from_head.as_secs_f64());
                        }
                    }
                }
                ServiceClass::Batch => {
                    batch_tasks += 1;
                    if done {
                        batch_done += 1;
                    }
                    if let Some(start) = t.last_start() {
                        batch_max_wait = batch_max_wait.max(start - t.submitted);
                    }
                }
            }
        }
        let mut by_tenant: std::collections::BTreeMap<TenantId, SlaCounts> = Default::default();
        for (c, tenant) in by_job.iter().zip(tenant_of_job).filter(|(c, _)| c.tasks > 0) {
            let t = by_tenant.entry(*tenant).or_default();
            t.tasks += c.tasks;
            t.late += c.late;
            t.dropped += c.dropped;
        }
        let gpu_time = span.0 as f64 * busy.len() as f64;
        let busy_total: u64 = busy.iter().map(|b| b.0).sum();
        RunMetrics {
            sla_windows: Vec::new(),
            uf_by_tenant: by_tenant,
            uf_tasks,
            uf_dropped,
            sla_met: if uf_tasks == 0 { 1.0 } else { uf_met as f64 / uf_tasks as f64 },
            sla_met_from_head: if uf_tasks == 0 {
                1.0
            } else {
                uf_met_from_head as f64 / uf_tasks as f64
            },
            utilization: if gpu_time > 0.0 { busy_total as f64 / gpu_time } else { 0.0 },
            resets,
            batch_done,
            batch_tasks,
            batch_max_wait_s: batch_max_wait.as_secs_f64(),
            not_completed,
            killed_work_s: Nanos(busy_total.saturating_sub(completed_busy)).as_secs_f64(),
            makespan_s: span.as_secs_f64(),
            mean_user_pool,
            mean_k,
            events,
            mean_queue_len: 0.0,
            uf_latencies_s: latencies,
            uf_head_latencies_s: head_latencies,
            gpus: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uf_task(job: usize, submitted: u64, start: u64, end: u64) -> TaskRecord {
        let mut t =
            TaskRecord::new(job, Nanos::from_millis(end - start), Nanos::from_millis(submitted));
        t.started(Nanos::from_millis(start));
        t.ended(Nanos::from_millis(end), TaskEnd::Done);
        t
    }

    /// One job's three tasks submitted together on one GPU, 100 ms each: from
    /// submission they take 100, 200 and 300 ms; from the head of the job's queue
    /// (task 1 reaches it when task 0 starts, task 2 when task 1 starts) 100, 200 and
    /// 200 ms. Another job's task started late does not move this job's heads.
    #[test]
    fn latency_from_the_head_of_the_job_queue() {
        let tasks = [
            uf_task(0, 0, 0, 100),
            uf_task(1, 0, 500, 600),
            uf_task(0, 0, 100, 200),
            uf_task(0, 0, 200, 300),
        ];
        let m = RunMetrics::from_records(
            &tasks,
            &[Nanos::ZERO; 2],
            &[TenantId(0), TenantId(1)],
            &[ServiceClass::UserFacing { sla: Nanos::from_millis(200) }; 2],
            vec![Nanos::from_millis(400)],
            Nanos::from_millis(600),
            0,
            0,
            0.0,
            0.0,
            true,
        );
        assert_eq!(m.uf_latencies_s, [0.1, 0.6, 0.2, 0.3]);
        assert_eq!(m.uf_head_latencies_s, [0.1, 0.6, 0.2, 0.2]);
        assert_eq!(m.sla_met, 0.5);
        assert_eq!(m.sla_met_from_head, 0.75);
    }
}
