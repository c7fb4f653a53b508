//! `tessera bench sim`: simulator speed against the bare event-queue floor.

use anyhow::Result;
use clap::Args;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::Instant;
use tessera_core::{Bytes, GpuSpec, Nanos, PolicyConfig};
use tessera_sim::engine::{SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workloads::flexy::{FlexyWorkloadParams, Mix, generate};

#[derive(Debug, Args)]
pub struct SimBenchArgs {
    /// Workload instances simulated per policy.
    #[arg(long, default_value_t = 20)]
    runs: u64,
    /// Print one JSON object per measurement instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: SimBenchArgs) -> Result<()> {
    let gpus = GpuSpec::uniform(4, Bytes::gib(4));
    let sla = Nanos::from_millis(200);
    let policies = [
        PolicyConfig::RoundRobin,
        PolicyConfig::Priority { reserve: 0, reset: Some(Nanos::from_secs(1)) },
        PolicyConfig::Flexy { reserve: 1, reset: None, sla, history: 10 },
        PolicyConfig::FlexyPid { sla, history: 10, gains: Default::default() },
    ];
    let workloads: Vec<_> = (0..a.runs)
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
                seed,
            })
        })
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    let mut total_events = 0u64;
    let (mut queue_len_sum, mut queue_len_runs) = (0.0f64, 0usize);
    for policy in &policies {
        let start = Instant::now();
        let mut events = 0u64;
        for w in &workloads {
            let opts = SimOptions {
                gpus: gpus.clone(),
                perf: PerfModel::default(),
                keep_latencies: false,
                event_budget: u64::MAX,
                sharing: tessera_sim::engine::Sharing::Exclusive,
                measure_gpus: false,
            };
            let m = Simulation::new(w, policy.build(&gpus)?, opts).run()?;
            events += m.events;
            queue_len_sum += m.mean_queue_len;
            queue_len_runs += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        total_events += events;
        rows.push((policy.label(), events, events as f64 / secs));
    }
    // Floor: the same number of events through a bare binary heap (push + pop), the
    // least any discrete-event engine must do per event, kept at the mean length the
    // engine's own queue had, so that the comparison is like for like.
    let per_policy = total_events / policies.len() as u64;
    let floor_len = ((queue_len_sum / queue_len_runs.max(1) as f64).round() as usize).max(1);
    let start = Instant::now();
    let mut heap = BinaryHeap::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..per_policy {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        heap.push(Reverse((x % 1_000_000_000, i)));
        if heap.len() > floor_len {
            black_box(heap.pop());
        }
    }
    while let Some(e) = heap.pop() {
        black_box(e);
    }
    let floor = per_policy as f64 / start.elapsed().as_secs_f64();

    let mut out = std::io::stdout().lock();
    use std::io::Write;
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"measurement": "event_queue_floor", "events": per_policy, "events_per_s": floor, "queue_len": floor_len})
        )?;
        for (label, events, eps) in &rows {
            writeln!(
                out,
                "{}",
                serde_json::json!({"measurement": "simulator", "policy": label, "events": events, "events_per_s": eps, "ratio_to_floor": eps / floor})
            )?;
        }
    } else {
        writeln!(
            out,
            "simulator speed, W2 at f=0.25 on 4 GPUs, {} workload instances per policy",
            a.runs
        )?;
        writeln!(
            out,
            "{:<14} {:>12} {:>16} {:>16}",
            "policy", "events", "events/s", "x event-queue floor"
        )?;
        for (label, events, eps) in &rows {
            writeln!(out, "{label:<14} {events:>12} {eps:>16.0} {:>16.3}", eps / floor)?;
        }
        writeln!(out, "{:<14} {:>12} {:>16.0} {:>16.3}", "heap floor", per_policy, floor, 1.0)?;
        writeln!(
            out,
            "(the floor's heap is held at {floor_len} entries, the engine's mean queue length)"
        )?;
    }
    Ok(())
}
