//! `tessera bench sim`: simulator speed against the bare event-queue floor, on the
//! exclusive path (Flexy's workload and policies) and on shared GPUs (eight co-running
//! tasks per GPU) side by side.

use anyhow::Result;
use clap::Args;
use std::hint::black_box;
use std::time::Instant;
use tessera_core::{Bytes, GpuSpec, Nanos, PolicyConfig};
use tessera_sim::Workload;
use tessera_sim::engine::{Sharing, SimOptions, Simulation};
use tessera_sim::min_heap::{MinHeap, Timed};
use tessera_sim::perf::PerfModel;
use tessera_sim::workloads::colocated::{self, ColocatedParams};
use tessera_sim::workloads::flexy::{FlexyWorkloadParams, Mix, generate};

#[derive(Debug, Args)]
pub struct SimBenchArgs {
    /// Workload instances simulated per policy.
    #[arg(long, default_value_t = 20)]
    runs: u64,
    /// Print one JSON object per measurement instead of a table.
    #[arg(long)]
    json: bool,
    /// Node sizes to run every policy at, as multiples of 4 GPUs and 32 tenants.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 10, 100])]
    scales: Vec<usize>,
    /// Only the scaled rows of policies whose label contains this (for profiling).
    #[arg(long)]
    only: Option<String>,
    /// Milliseconds of each of the floor's 5 timed runs (`--quick`: 10).
    #[arg(long, default_value_t = 100)]
    floor_ms: u64,
    #[command(flatten)]
    quick: super::Quick,
}

/// One measured configuration.
struct Row {
    workload: &'static str,
    path: &'static str,
    policy: String,
    events: u64,
    events_per_s: f64,
    tasks: u64,
    ns_per_task: f64,
    queue_len: usize,
}

/// What a run of every workload under a policy measured.
struct Measured {
    events: u64,
    /// Tasks completed or dropped: what a simulation is for, comparable across
    /// policies (a policy's events include its superseded predictions and ticks).
    tasks: u64,
    secs: f64,
    queue_len: usize,
}

impl Measured {
    fn events_per_s(&self) -> f64 {
        self.events as f64 / self.secs
    }
    fn ns_per_task(&self) -> f64 {
        self.secs * 1e9 / self.tasks.max(1) as f64
    }
}

/// Run every workload under `policy` with `sharing`.
fn measure(
    workloads: &[Workload],
    gpus: &[GpuSpec],
    policy: &PolicyConfig,
    sharing: Sharing,
) -> Result<Measured> {
    let start = Instant::now();
    let (mut events, mut tasks) = (0u64, 0u64);
    let mut queue_len_sum = 0.0;
    for w in workloads {
        let opts = SimOptions {
            gpus: gpus.to_vec(),
            perf: PerfModel::default(),
            keep_latencies: false,
            event_budget: u64::MAX,
            sharing,
            measure_gpus: false,
            sla_window: None,
        };
        let m = Simulation::new(w, policy.build(gpus)?, opts).run()?;
        events += m.events;
        tasks += (m.uf_tasks + m.batch_done) as u64;
        queue_len_sum += m.mean_queue_len;
    }
    let secs = start.elapsed().as_secs_f64();
    let queue_len = ((queue_len_sum / workloads.len().max(1) as f64).round() as usize).max(1);
    Ok(Measured { events, tasks, secs, queue_len })
}

/// [`measure`] for the scaled rows, in a function of its own: what
/// `scripts/sim-instructions.sh` counts instructions in (callgrind's
/// `--toggle-collect`), leaving out the Flexy rows and the warm-up.
#[inline(never)]
fn measure_scaled(
    workloads: &[Workload],
    gpus: &[GpuSpec],
    policy: &PolicyConfig,
    sharing: Sharing,
) -> Result<Measured> {
    measure(workloads, gpus, policy, sharing)
}

/// An event queue's entry as large as the engine's (32 bytes: when, a sequence number
/// for ties, and what happens), ordered as the engine's are.
type FloorEntry = Timed<[u64; 2]>;

const _: () = assert!(std::mem::size_of::<FloorEntry>() == 32);

/// The floor: ns per event of a real event queue held at `len` entries — pop the
/// earliest, push one at its time plus a random delay (entries the engine's size) —
/// the least any discrete-event engine with a queue that long must do per event. The
/// median of 5 runs of at least `ms` milliseconds each.
fn queue_floor_ns(len: usize, ms: u64) -> f64 {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut heap = MinHeap::default();
    for i in 0..len.max(1) as u64 {
        heap.push(FloorEntry { at: Nanos(next() % 1_000_000_000), seq: i, what: [i; 2] });
    }
    let mut seq = len as u64;
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            let mut events = 0u64;
            while start.elapsed() < std::time::Duration::from_millis(ms) {
                for _ in 0..4096 {
                    let e = heap.pop().expect("the queue is never empty");
                    seq += 1;
                    let what = black_box(e.what);
                    heap.push(FloorEntry { at: Nanos(e.at.0 + 1 + next() % 1_000_000), seq, what });
                }
                events += 4096;
            }
            start.elapsed().as_nanos() as f64 / events as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// One policy measured at every scale on the co-location workload.
struct Scaled {
    policy: String,
    path: &'static str,
    /// (scale, what was measured, the floor's ns per event at its queue length) per
    /// scale.
    at: Vec<(usize, Measured, f64)>,
}

pub fn run(mut a: SimBenchArgs) -> Result<()> {
    if a.quick.on() {
        a.runs = a.runs.min(1);
        a.floor_ms = a.floor_ms.min(10);
        a.scales.retain(|&s| s == 1);
    }
    let gpus = GpuSpec::uniform(4, Bytes::gib(4));
    let sla = Nanos::from_millis(200);
    let f_minres1 = PolicyConfig::Flexy {
        reserve: 1,
        reset: None,
        sla,
        history: 10,
        order: Default::default(),
    };
    let flexy_policies = [
        PolicyConfig::RoundRobin,
        PolicyConfig::Priority { reserve: 0, reset: Some(Nanos::from_secs(1)) },
        f_minres1.clone(),
        PolicyConfig::FlexyPid { sla, history: 10, gains: Default::default() },
    ];
    let flexy: Vec<_> = (0..a.runs)
        .map(|seed| {
            generate(&FlexyWorkloadParams {
                mix: Mix::W2,
                load: 0.25,
                gpus: 4,
                sla,
                pareto_shape: 2.5,
                task_cv: 0.05,
                submission: Default::default(),
                uf_outstanding: Default::default(),
                // the benchmark's workload as before issue 24's readings, so its
                // numbers stay comparable across sessions
                background_batch: false,
                host_per_task: Nanos::ZERO,
                seed,
            })
        })
        .collect::<Result<_, _>>()?;
    // every policy of the core on the co-location workload (8 jobs per GPU, each
    // always with a task out), at 4, 40 and 400 GPUs; the same number of tasks in all
    // at each scale (fewer instances as the node grows), so every row runs about as
    // many events
    let scaled_policies: Vec<(PolicyConfig, Sharing)> = vec![
        (PolicyConfig::RoundRobin, Sharing::Exclusive),
        (
            PolicyConfig::Priority { reserve: 0, reset: Some(Nanos::from_secs(1)) },
            Sharing::Exclusive,
        ),
        (f_minres1, Sharing::Exclusive),
        (
            PolicyConfig::FlexyPid { sla, history: 10, gains: Default::default() },
            Sharing::Exclusive,
        ),
        (PolicyConfig::MemSafe { notification: Default::default() }, Sharing::Exclusive),
        (PolicyConfig::LeastLoaded { per_gpu: 1 }, Sharing::Exclusive),
        (PolicyConfig::LeastLoaded { per_gpu: 8 }, Sharing::Processor),
        (PolicyConfig::Credit, Sharing::Exclusive),
        (PolicyConfig::Fair { spin: Nanos::ZERO }, Sharing::Exclusive),
        (
            PolicyConfig::Node {
                params: tessera_core::policies::node::NodeParams::new(
                    tessera_core::policies::flexy::FlexyParams {
                        reserve: 1,
                        reset: None,
                        sla,
                        history: 10,
                        order: Default::default(),
                    },
                ),
            },
            Sharing::Exclusive,
        ),
    ];
    let scaled_policies: Vec<_> = scaled_policies
        .into_iter()
        .filter(|(p, _)| a.only.as_ref().is_none_or(|o| p.label().contains(o.as_str())))
        .collect();
    let colocated = |scale: usize| -> Vec<Workload> {
        let instances = (a.runs as usize * 10 / scale).max(1);
        (0..instances as u64)
            .map(|seed| {
                colocated::generate(&ColocatedParams {
                    gpus: 4 * scale,
                    per_gpu: 8,
                    tasks_per_job: 100,
                    mean: Nanos::from_millis(50),
                    seed,
                })
            })
            .collect()
    };
    // the floor at each queue length met, timed once
    let floor_ms = a.floor_ms.max(1);
    let mut floor_cache = std::collections::BTreeMap::new();
    let mut floor_at =
        |len: usize| *floor_cache.entry(len).or_insert_with(|| queue_floor_ns(len, floor_ms));
    // one unmeasured run first, so that the first row does not pay for a cold process
    // (page faults, allocator growth)
    measure(&flexy[..1], &gpus, &flexy_policies[0], Sharing::Exclusive)?;
    let progress = indicatif::ProgressBar::new(
        (flexy_policies.len() + scaled_policies.len() * a.scales.len()) as u64,
    );
    let mut rows = Vec::new();
    for policy in &flexy_policies {
        let r = measure(&flexy, &gpus, policy, Sharing::Exclusive)?;
        rows.push(Row {
            workload: "flexy-w2",
            path: "exclusive",
            policy: policy.label(),
            events: r.events,
            events_per_s: r.events_per_s(),
            tasks: r.tasks,
            ns_per_task: r.ns_per_task(),
            queue_len: r.queue_len,
        });
        progress.inc(1);
    }
    anyhow::ensure!(a.scales.iter().all(|s| *s > 0), "a scale is a positive multiple of the node");
    // each scale's workload made once, for every policy
    let workloads: Vec<Vec<Workload>> = a.scales.iter().map(|s| colocated(*s)).collect();
    let mut scaled = Vec::new();
    for (policy, sharing) in &scaled_policies {
        let mut at = Vec::new();
        for (&scale, workload) in a.scales.iter().zip(&workloads) {
            let node = GpuSpec::uniform(4 * scale, Bytes::gib(4));
            let m = measure_scaled(workload, &node, policy, *sharing)?;
            let floor = floor_at(m.queue_len);
            at.push((scale, m, floor));
            progress.inc(1);
        }
        scaled.push(Scaled {
            policy: policy.label(),
            path: if *sharing == Sharing::Exclusive { "exclusive" } else { "shared" },
            at,
        });
    }
    progress.finish_and_clear();

    let floors: Vec<f64> = rows.iter().map(|r| floor_at(r.queue_len)).collect();
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    // cost per task at the largest scale over that at the smallest (the first and last
    // given), of the engine and (`floor`, per event) of the bare event queue
    let growth_of = |s: &Scaled, floor: bool| {
        let cost = |x: &(usize, Measured, f64)| if floor { x.2 } else { x.1.ns_per_task() };
        s.at.last().map_or(f64::NAN, cost) / s.at.first().map_or(f64::NAN, cost)
    };
    let growth = |s: &Scaled| growth_of(s, false);
    let floor_growth = |s: &Scaled| growth_of(s, true);
    if a.json {
        for (r, floor) in rows.iter().zip(&floors) {
            writeln!(
                out,
                "{}",
                serde_json::json!({"measurement": "simulator", "workload": r.workload, "path": r.path, "policy": r.policy, "scale": 1, "events": r.events, "events_per_s": r.events_per_s, "tasks": r.tasks, "ns_per_task": r.ns_per_task, "ns_per_event": 1e9 / r.events_per_s, "queue_len": r.queue_len, "floor_ns_per_event": floor, "floor_over_task": floor / r.ns_per_task})
            )?;
        }
        for s in &scaled {
            for (scale, m, floor) in &s.at {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"measurement": "simulator", "workload": "colocated", "path": s.path, "policy": s.policy, "scale": scale, "gpus": 4 * scale, "tenants": 32 * scale, "events": m.events, "tasks": m.tasks, "ns_per_task": m.ns_per_task(), "ns_per_event": 1e9 / m.events_per_s(), "queue_len": m.queue_len, "floor_ns_per_event": floor, "floor_over_task": floor / m.ns_per_task()})
                )?;
            }
            writeln!(
                out,
                "{}",
                serde_json::json!({"measurement": "cost per task, largest scale over smallest", "policy": s.policy, "path": s.path, "scales": [a.scales.first(), a.scales.last()], "ratio": growth(s), "floor_ratio": floor_growth(s)})
            )?;
        }
    } else {
        writeln!(
            out,
            "simulator speed on 4 GPUs, {} workload instances per row: Flexy W2 at f=0.25",
            a.runs
        )?;
        writeln!(
            out,
            "{:<10} {:<10} {:<14} {:>9} {:>9} {:>10} {:>10} {:>6} {:>12} {:>8}",
            "workload",
            "path",
            "policy",
            "tasks",
            "events",
            "ns/task",
            "ns/event",
            "queue",
            "floor ns/ev",
            "x floor"
        )?;
        for (r, floor) in rows.iter().zip(&floors) {
            writeln!(
                out,
                "{:<10} {:<10} {:<14} {:>9} {:>9} {:>10.0} {:>10.0} {:>6} {:>12.1} {:>8.3}",
                r.workload,
                r.path,
                r.policy,
                r.tasks,
                r.events,
                r.ns_per_task,
                1e9 / r.events_per_s,
                r.queue_len,
                floor,
                floor / r.ns_per_task
            )?;
        }
        writeln!(
            out,
            "\nevery policy on the co-location workload (8 jobs per GPU, 100 tasks each) at {:?} times the node (4 GPUs, 32 tenants): ns per task completed (x floor: the event queue's ns per event over it)",
            a.scales
        )?;
        write!(out, "{:<14} {:<10}", "policy", "path")?;
        for scale in &a.scales {
            write!(out, " {:>11} {:>8}", format!("ns/task {scale}x"), "x floor")?;
        }
        writeln!(out, " {:>15} {:>16}", "cost last/first", "floor last/first")?;
        for s in &scaled {
            write!(out, "{:<14} {:<10}", s.policy, s.path)?;
            for (_, m, floor) in &s.at {
                write!(out, " {:>11.0} {:>8.3}", m.ns_per_task(), floor / m.ns_per_task())?;
            }
            writeln!(out, " {:>15.2} {:>16.2}", growth(s), floor_growth(s))?;
        }
        writeln!(
            out,
            "(the floor: an event queue held at the row's mean engine queue length, 32-byte entries, pop the earliest and push at its time plus a delay; median of 5 runs of {floor_ms} ms)"
        )?;
    }
    Ok(())
}
