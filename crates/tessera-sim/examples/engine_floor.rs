//! The floor of the simulator's architecture (issue 55), measured rather than argued:
//! the least an engine of the same shape must do per task on `tessera bench sim`'s
//! co-location workload under round robin — a `Box<dyn Policy>` told of each event as
//! an [`Event`] and answering [`Action`]s, the engine's event queue of (time, sequence) entries,
//! `tessera-gpu`'s exclusive model, a record per task — and nothing else: no
//! partitions, resets, migrations, batches, CPU phases, residency or per-GPU
//! measurements, and only the checks that a dispatch goes to an idle GPU and a waiting
//! task.
//!
//! Two runs of it, both checked against the engine (the same events, makespan and
//! longest wait on every workload, bit for bit):
//! - `measure_lean`: the real `RoundRobin` policy (its board) over the floor engine;
//! - `measure_leanest`: over a round robin holding the least state it needs (a queue of
//!   task ids per tenant, the backlogged tenants and idle GPUs as bitsets).
//!
//! `scripts/sim-floor.sh` counts their instructions per task with callgrind, as
//! `scripts/sim-instructions.sh` counts the engine's. Usage: `engine_floor [SCALE]`
//! (the node as a multiple of 4 GPUs and 32 jobs; the bench's workloads at that scale).

use std::hint::black_box;
use tessera_core::{
    Action, Event, GpuId, GpuSpec, Nanos, Placement, Policy, PolicyConfig, TaskId, TaskSpec,
};
use tessera_gpu::exclusive::ExclusiveGpu;
use tessera_sim::Workload;
use tessera_sim::engine::{Sharing, SimOptions, Simulation};
use tessera_sim::min_heap::{MinHeap, Timed};
use tessera_sim::perf::PerfModel;
use tessera_sim::workloads::colocated::{ColocatedParams, generate};

/// An event: a task's end on a GPU (its index, the task), at (time, sequence number).
type Entry = Timed<(u32, u64)>;

/// A task's record: its job, where it is (0 waiting, 1 running, 2 ended), its times.
#[derive(Clone, Copy)]
struct Rec {
    job: u32,
    state: u8,
    submitted: u64,
    work: u64,
    first_start: u64,
    end: u64,
}

/// A GPU: its model and the task on it, with its start.
struct Gpu {
    model: ExclusiveGpu,
    running: Option<(u64, u64)>,
    busy: u64,
}

/// The floor engine.
struct Lean<'w> {
    w: &'w Workload,
    policy: Box<dyn Policy>,
    heap: MinHeap<Entry>,
    seq: u64,
    now: u64,
    gpus: Vec<Gpu>,
    recs: Vec<Rec>,
    jobs: Vec<(u32, u32)>,
    actions: Vec<Action>,
    events: u64,
    k_weighted: u128,
    last: u64,
}

impl<'w> Lean<'w> {
    fn deliver(&mut self, e: &Event) -> Result<(), String> {
        self.actions.clear();
        self.policy.on_event(Nanos(self.now), e, &mut self.actions);
        while let Some(a) = self.actions.pop() {
            // (one action per event in round robin; several would need the order kept)
            match a {
                Action::Dispatch { task, placement } => self.dispatch(task, placement)?,
                other => return Err(format!("unsupported {other:?}")),
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, task: TaskId, p: Placement) -> Result<(), String> {
        let g = self.gpus.get_mut(p.gpu.0 as usize).ok_or("unknown gpu")?;
        if p.partition.is_some() || g.running.is_some() {
            return Err("busy".into());
        }
        let r = self.recs.get_mut(task.0 as usize).ok_or("unknown task")?;
        if r.state != 0 {
            return Err("not waiting".into());
        }
        r.state = 1;
        if r.first_start == u64::MAX {
            r.first_start = self.now;
        }
        let work = r.work;
        // `PerfModel::exec_time` at the default speed
        let exec = tessera_gpu::rounding::round_u64(work as f64 / 1.0).max(1);
        g.model.start(self.now, task.0, exec, 1.0).map_err(|e| e.to_string())?;
        g.running = Some((task.0, self.now));
        let (at, _) = g.model.next_finish().ok_or("no finish")?;
        self.heap.push(Entry { at: Nanos(at), seq: self.seq, what: (p.gpu.0, task.0) });
        self.seq += 1;
        Ok(())
    }

    fn submit_next(&mut self, job: usize) -> Result<(), String> {
        let spec = &self.w.jobs[job];
        let (next, _) = self.jobs[job];
        if next as usize >= spec.tasks.len() {
            return Ok(());
        }
        self.jobs[job].0 += 1;
        let work = spec.tasks[next as usize].0;
        let id = TaskId(self.recs.len() as u64);
        self.recs.push(Rec {
            job: job as u32,
            state: 0,
            submitted: self.now,
            work,
            first_start: u64::MAX,
            end: 0,
        });
        let t = TaskSpec {
            launch: None,
            batch: 1,
            id,
            tenant: spec.tenant.id,
            kernel: spec.kernel,
            memory: tessera_core::Bytes(0),
        };
        self.deliver(&Event::TaskSubmitted(t))
    }

    fn run(mut self) -> Result<(u64, u64, u64), String> {
        self.seq = self.w.jobs.len() as u64;
        for i in 0..self.w.jobs.len() {
            self.events += 1;
            self.deliver(&Event::TenantRegistered(self.w.jobs[i].tenant.clone()))?;
            self.submit_next(i)?;
        }
        while let Some(Entry { at: Nanos(at), what: (gpu, ended), .. }) = self.heap.pop() {
            self.events += 1;
            self.k_weighted += u128::from(at - self.last) * self.policy.min_reservation() as u128;
            self.last = at;
            self.now = at;
            let g = &mut self.gpus[gpu as usize];
            match g.model.pop_finished(self.now) {
                Ok(Some(id)) if id == ended => {}
                _ => return Err("model disagrees".into()),
            }
            let (task, started) = g.running.take().ok_or("nothing running")?;
            let ran = self.now - started;
            g.busy += ran;
            let r = &mut self.recs[task as usize];
            r.state = 2;
            r.end = self.now;
            let job = r.job as usize;
            self.jobs[job].1 += 1;
            self.deliver(&Event::TaskFinished {
                task: TaskId(task),
                placement: Placement::whole(GpuId(gpu)),
                ran_for: Nanos(ran),
                measured: true,
                result: Ok(()),
            })?;
            self.submit_next(job)?;
            if self.jobs[job].1 as usize == self.w.jobs[job].tasks.len() {
                let tenant = self.w.jobs[job].tenant.id;
                self.deliver(&Event::TenantLeft { tenant })?;
            }
        }
        black_box(self.k_weighted);
        let makespan = self.recs.iter().map(|r| r.end).max().unwrap_or(0);
        let max_wait = self.recs.iter().map(|r| r.first_start - r.submitted).max().unwrap_or(0);
        Ok((makespan, max_wait, self.events))
    }
}

/// Round robin over its own least state: a queue of task ids per tenant (dense ids), the
/// backlogged tenants and the idle GPUs as bitsets, the task on each GPU.
#[derive(Debug)]
struct LeanRr {
    queues: Vec<std::collections::VecDeque<u64>>,
    backlogged: Vec<u64>,
    idle: Vec<u64>,
    running: Vec<Option<u64>>,
    cursor: Option<usize>,
    queued: usize,
}

impl LeanRr {
    fn new(gpus: usize) -> LeanRr {
        let mut idle = vec![0u64; gpus.div_ceil(64)];
        for g in 0..gpus {
            idle[g / 64] |= 1 << (g % 64);
        }
        LeanRr {
            queues: Vec::new(),
            backlogged: Vec::new(),
            idle,
            running: vec![None; gpus],
            cursor: None,
            queued: 0,
        }
    }

    fn first_from(bits: &[u64], from: usize) -> Option<usize> {
        let mut w = from / 64;
        if w >= bits.len() {
            return None;
        }
        let mut word = bits[w] & (u64::MAX << (from % 64));
        loop {
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
            w += 1;
            if w >= bits.len() {
                return None;
            }
            word = bits[w];
        }
    }

    fn set(bits: &mut [u64], i: usize, on: bool) {
        if on {
            bits[i / 64] |= 1 << (i % 64);
        } else {
            bits[i / 64] &= !(1 << (i % 64));
        }
    }
}

impl Policy for LeanRr {
    fn label(&self) -> String {
        "LeanRr".into()
    }

    fn on_event(&mut self, _now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        match event {
            Event::TenantRegistered(spec) => {
                let t = spec.id.0 as usize;
                if self.queues.len() <= t {
                    self.queues.resize_with(t + 1, Default::default);
                    self.backlogged.resize((t + 1).div_ceil(64), 0);
                }
            }
            Event::TaskSubmitted(spec) => {
                let t = spec.tenant.0 as usize;
                self.queues[t].push_back(spec.id.0);
                self.queued += 1;
                Self::set(&mut self.backlogged, t, true);
            }
            Event::TaskFinished { placement, .. } => {
                let g = placement.gpu.0 as usize;
                self.running[g] = None;
                Self::set(&mut self.idle, g, true);
            }
            _ => {}
        }
        let mut from = 0;
        while self.queued > 0
            && let Some(g) = Self::first_from(&self.idle, from)
        {
            from = g + 1;
            let after = self.cursor.map_or(0, |c| c + 1);
            let Some(t) = Self::first_from(&self.backlogged, after)
                .or_else(|| Self::first_from(&self.backlogged, 0))
            else {
                break;
            };
            self.cursor = Some(t);
            let q = &mut self.queues[t];
            let task = q.pop_front().expect("a backlogged tenant has a task");
            if q.is_empty() {
                Self::set(&mut self.backlogged, t, false);
            }
            self.queued -= 1;
            self.running[g] = Some(task);
            Self::set(&mut self.idle, g, false);
            actions.push(Action::Dispatch {
                task: TaskId(task),
                placement: Placement::whole(GpuId(g as u32)),
            });
        }
    }
}

#[inline(never)]
fn measure_lean(ws: &[Workload], gpus: &[GpuSpec]) -> Vec<(u64, u64, u64)> {
    measure_with(ws, gpus, &|| PolicyConfig::RoundRobin.build(gpus).unwrap())
}

#[inline(never)]
fn measure_leanest(ws: &[Workload], gpus: &[GpuSpec]) -> Vec<(u64, u64, u64)> {
    measure_with(ws, gpus, &|| Box::new(LeanRr::new(gpus.len())))
}

fn measure_with(
    ws: &[Workload],
    gpus: &[GpuSpec],
    policy: &dyn Fn() -> Box<dyn Policy>,
) -> Vec<(u64, u64, u64)> {
    ws.iter()
        .map(|w| {
            let lean = Lean {
                w,
                policy: policy(),
                heap: MinHeap::default(),
                seq: 0,
                now: 0,
                gpus: gpus
                    .iter()
                    .map(|_| Gpu {
                        model: ExclusiveGpu::with_capacity(1.0).without_usage(),
                        running: None,
                        busy: 0,
                    })
                    .collect(),
                recs: Vec::with_capacity(w.task_count()),
                jobs: vec![(0, 0); w.jobs.len()],
                actions: Vec::new(),
                events: 0,
                k_weighted: 0,
                last: 0,
            };
            lean.run().unwrap()
        })
        .collect()
}

/// Run both floors on the bench's workloads at `scale` and check them against the
/// engine; the tasks run.
fn run_and_check(scale: usize) -> usize {
    let instances = (10 / scale).max(1);
    let ws: Vec<Workload> = (0..instances as u64)
        .map(|seed| {
            generate(&ColocatedParams {
                gpus: 4 * scale,
                per_gpu: 8,
                tasks_per_job: 100,
                mean: Nanos::from_millis(50),
                seed,
            })
        })
        .collect();
    let gpus = GpuSpec::uniform(4 * scale, tessera_core::Bytes::gib(4));
    let lean = black_box(measure_lean(&ws, &gpus));
    let leanest = black_box(measure_leanest(&ws, &gpus));
    assert_eq!(lean, leanest, "the least round robin decides as the policy does");
    for (w, l) in ws.iter().zip(&lean) {
        let opts = SimOptions {
            gpus: gpus.clone(),
            perf: PerfModel::default(),
            keep_latencies: false,
            event_budget: u64::MAX,
            sharing: Sharing::Exclusive,
            measure_gpus: false,
            sla_window: None,
        };
        let m =
            Simulation::new(w, PolicyConfig::RoundRobin.build(&gpus).unwrap(), opts).run().unwrap();
        let (ms, mw, ev) = *l;
        assert_eq!(m.events, ev, "events");
        assert_eq!(m.makespan_s.to_bits(), (ms as f64 / 1e9).to_bits(), "makespan");
        assert_eq!(m.batch_max_wait_s.to_bits(), (mw as f64 / 1e9).to_bits(), "longest wait");
    }
    ws.iter().map(|w| w.task_count()).sum()
}

fn main() {
    let scale: usize = std::env::args().nth(1).map_or(1, |s| s.parse().expect("a scale"));
    let tasks = run_and_check(scale);
    // (what scripts/sim-floor.sh divides by)
    use std::io::Write;
    writeln!(
        std::io::stdout(),
        "tasks {tasks}: the same makespan, longest wait and events as the engine"
    )
    .expect("stdout");
}

#[cfg(test)]
mod tests {
    /// The floor engine, under both round robins, runs the bench's workloads as the
    /// engine does: the counts of scripts/sim-floor.sh are of the same work.
    #[test]
    fn runs_the_workloads_as_the_engine_does() {
        assert_eq!(super::run_and_check(1), 32_000);
    }
}
