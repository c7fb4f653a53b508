//! `tessera bench sim`: simulator speed against the bare event-queue floor, on the
//! exclusive path (Flexy's workload and policies) and on shared GPUs (eight co-running
//! tasks per GPU) side by side.

use anyhow::Result;
use clap::Args;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::Instant;
use tessera_core::{Bytes, GpuSpec, Nanos, PolicyConfig};
use tessera_sim::Workload;
use tessera_sim::engine::{Sharing, SimOptions, Simulation};
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
    queue_len: usize,
}

/// Run every workload under `policy` with `sharing`; events, events/s and the
/// engine's mean queue length.
fn measure(
    workloads: &[Workload],
    gpus: &[GpuSpec],
    policy: &PolicyConfig,
    sharing: Sharing,
) -> Result<(u64, f64, usize)> {
    let start = Instant::now();
    let mut events = 0u64;
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
        queue_len_sum += m.mean_queue_len;
    }
    let secs = start.elapsed().as_secs_f64();
    let queue_len = ((queue_len_sum / workloads.len().max(1) as f64).round() as usize).max(1);
    Ok((events, events as f64 / secs, queue_len))
}

/// The floor: `events` through a bare binary heap (push + pop) held at `len` entries —
/// the least any discrete-event engine with a queue that long must do per event.
fn heap_floor(events: u64, len: usize) -> f64 {
    let start = Instant::now();
    let mut heap = BinaryHeap::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..events {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        heap.push(Reverse((x % 1_000_000_000, i)));
        if heap.len() > len {
            black_box(heap.pop());
        }
    }
    while let Some(e) = heap.pop() {
        black_box(e);
    }
    events as f64 / start.elapsed().as_secs_f64()
}

/// One policy measured at every scale on the co-location workload.
struct Scaled {
    policy: String,
    path: &'static str,
    /// (scale, events, events/s, heap floor events/s) per scale.
    at: Vec<(usize, u64, f64, f64)>,
}

pub fn run(mut a: SimBenchArgs) -> Result<()> {
    if a.quick.on() {
        a.runs = a.runs.min(1);
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
            events: r.0,
            events_per_s: r.1,
            queue_len: r.2,
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
            let (events, per_s, queue) = measure(workload, &node, policy, *sharing)?;
            at.push((scale, events, per_s, heap_floor(events, queue)));
            progress.inc(1);
        }
        scaled.push(Scaled {
            policy: policy.label(),
            path: if *sharing == Sharing::Exclusive { "exclusive" } else { "shared" },
            at,
        });
    }
    progress.finish_and_clear();

    let floors: Vec<f64> = rows.iter().map(|r| heap_floor(r.events, r.queue_len)).collect();
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    // cost per event at the largest scale over that at the smallest (the first and last
    // given), of the engine or (`floor`) of the bare heap: how much a queue's cost per
    // event grows with its length and the cache misses that come with it
    let growth_of = |s: &Scaled, floor: bool| {
        let per_s = |x: &(usize, u64, f64, f64)| if floor { x.3 } else { x.2 };
        s.at.first().map_or(f64::NAN, per_s) / s.at.last().map_or(f64::NAN, per_s)
    };
    let growth = |s: &Scaled| growth_of(s, false);
    let floor_growth = |s: &Scaled| growth_of(s, true);
    if a.json {
        for (r, floor) in rows.iter().zip(&floors) {
            writeln!(
                out,
                "{}",
                serde_json::json!({"measurement": "simulator", "workload": r.workload, "path": r.path, "policy": r.policy, "scale": 1, "events": r.events, "events_per_s": r.events_per_s, "queue_len": r.queue_len, "floor_events_per_s": floor, "ratio_to_floor": r.events_per_s / floor})
            )?;
        }
        for s in &scaled {
            for (scale, events, per_s, floor) in &s.at {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"measurement": "simulator", "workload": "colocated", "path": s.path, "policy": s.policy, "scale": scale, "gpus": 4 * scale, "tenants": 32 * scale, "events": events, "events_per_s": per_s, "floor_events_per_s": floor, "ratio_to_floor": per_s / floor})
                )?;
            }
            writeln!(
                out,
                "{}",
                serde_json::json!({"measurement": "cost per event, largest scale over smallest", "policy": s.policy, "path": s.path, "scales": [a.scales.first(), a.scales.last()], "ratio": growth(s), "floor_ratio": floor_growth(s)})
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
            "{:<10} {:<10} {:<14} {:>11} {:>12} {:>6} {:>12} {:>8}",
            "workload", "path", "policy", "events", "events/s", "queue", "heap floor/s", "x floor"
        )?;
        for (r, floor) in rows.iter().zip(&floors) {
            writeln!(
                out,
                "{:<10} {:<10} {:<14} {:>11} {:>12.0} {:>6} {:>12.0} {:>8.3}",
                r.workload,
                r.path,
                r.policy,
                r.events,
                r.events_per_s,
                r.queue_len,
                floor,
                r.events_per_s / floor
            )?;
        }
        writeln!(
            out,
            "\nevery policy on the co-location workload (8 jobs per GPU, 100 tasks each) at {:?} times the node (4 GPUs, 32 tenants)",
            a.scales
        )?;
        write!(out, "{:<14} {:<10}", "policy", "path")?;
        for scale in &a.scales {
            write!(out, " {:>10} {:>10}", format!("ev/s {scale}x"), "x floor")?;
        }
        writeln!(out, " {:>15} {:>16}", "cost last/first", "floor last/first")?;
        for s in &scaled {
            write!(out, "{:<14} {:<10}", s.policy, s.path)?;
            for (_, _, per_s, floor) in &s.at {
                write!(out, " {:>10.0} {:>10.3}", per_s, per_s / floor)?;
            }
            writeln!(out, " {:>15.2} {:>16.2}", growth(s), floor_growth(s))?;
        }
        writeln!(
            out,
            "(each row's floor is a bare binary heap held at that row's mean engine queue length, over the same number of events)"
        )?;
    }
    Ok(())
}
