//! Flexy packs user-facing work onto its pool (issue 24, item 1): on a workload with a
//! persistent user-facing backlog, the pool GPUs that run user-facing work stay in
//! the pool, so Flexy and priority must behave differently — they did not when a
//! batch GPU freeing next displaced a pool GPU still running a user-facing task.

use tessera_core::policies::flexy::PoolOrder;
use tessera_core::{Bytes, GpuSpec, Nanos, PolicyConfig};
use tessera_sim::RunMetrics;
use tessera_sim::engine::{Sharing, SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workloads::flexy::{FlexyWorkloadParams, Mix, UfOutstanding, generate};

const SLA: Nanos = Nanos::from_millis(200);
const RESET: Nanos = Nanos::from_millis(100);

fn run(policy: &PolicyConfig, mix: Mix, load: f64, seed: u64) -> RunMetrics {
    let w = generate(&FlexyWorkloadParams {
        mix,
        load,
        gpus: 4,
        sla: SLA,
        pareto_shape: 2.5,
        task_cv: 0.05,
        submission: Default::default(),
        uf_outstanding: UfOutstanding::UpTo2N,
        background_batch: false,
        host_per_task: Nanos::ZERO,
        seed,
    })
    .unwrap();
    let gpus = GpuSpec::uniform(4, Bytes::gib(4));
    let opts = SimOptions {
        gpus: gpus.clone(),
        perf: PerfModel::default(),
        keep_latencies: true,
        event_budget: u64::MAX,
        sharing: Sharing::Exclusive,
        measure_gpus: false,
        sla_window: None,
    };
    Simulation::new(&w, policy.build(&gpus).unwrap(), opts).run().unwrap()
}

fn flexy(order: PoolOrder) -> PolicyConfig {
    PolicyConfig::Flexy { reserve: 0, reset: Some(RESET), sla: SLA, history: 10, order }
}

fn median_latency(m: &RunMetrics) -> f64 {
    let mut l = m.uf_latencies_s.clone();
    l.sort_by(f64::total_cmp);
    l[l.len() / 2]
}

/// W2 (20% user-facing) at f = 0.25, every job keeping up to 2N tasks outstanding (§III
/// read literally), five seeds: under packing, user-facing tasks queue for the pool's
/// few GPUs instead of taking whichever GPU frees next, so their median latency is
/// well above priority's (which spreads them over every free GPU), the pool stays
/// larger than under Algorithm 1's printed sort. Before packing, F-Reset's median was
/// priority's or below (0.033 s against 0.043 s on seed 1). (Which resets more is
/// left to the experiment's claims: with P-Reset as the paper defines it, resetting
/// only when every GPU runs batch work, it resets less than F-Reset here.)
#[test]
fn flexy_packs_user_facing_work_where_priority_spreads_it() {
    let priority = PolicyConfig::Priority { reserve: 0, reset: Some(RESET) };
    for seed in 1..=5 {
        let p = run(&priority, Mix::W2, 0.25, seed);
        let f = run(&flexy(PoolOrder::Packing), Mix::W2, 0.25, seed);
        let c = run(&flexy(PoolOrder::Completion), Mix::W2, 0.25, seed);
        let (pm, fm, cm) = (median_latency(&p), median_latency(&f), median_latency(&c));
        assert!(fm >= 1.5 * pm, "seed {seed}: F-Reset median {fm:.3} s, P-Reset {pm:.3} s");
        assert!(
            cm < 1.5 * pm,
            "seed {seed}: the completion order spreads like priority: {cm:.3} vs {pm:.3}"
        );
        assert!(
            f.mean_user_pool > c.mean_user_pool,
            "seed {seed}: pool {:.2} packing, {:.2} completion order",
            f.mean_user_pool,
            c.mean_user_pool
        );
        assert_eq!(f.batch_done, p.batch_done, "every batch task completes under both");
    }
}

/// The numbers behind the test above, for all three mixes (`--ignored --nocapture`).
#[test]
#[ignore]
fn explore() {
    let priority = PolicyConfig::Priority { reserve: 0, reset: Some(RESET) };
    for (mix, load) in [(Mix::W1, 0.25), (Mix::W2, 0.25), (Mix::W3, 0.25)] {
        for seed in 1..6 {
            for p in [&priority, &flexy(PoolOrder::Packing), &flexy(PoolOrder::Completion)] {
                let m = run(p, mix, load, seed);
                let mut l = m.uf_latencies_s.clone();
                l.sort_by(f64::total_cmp);
                let q = |f: f64| l[((l.len() - 1) as f64 * f) as usize];
                eprintln!(
                    "{mix:?} f={load} s{seed} {:<20} resets {:>5} pool {:.2} sla {:.3} p50 {:.3} p99 {:.3} batch {} util {:.3} makespan {:.0}",
                    p.label(),
                    m.resets,
                    m.mean_user_pool,
                    m.sla_met,
                    q(0.5),
                    q(0.99),
                    m.batch_done,
                    m.utilization,
                    m.makespan_s
                );
            }
        }
    }
}
