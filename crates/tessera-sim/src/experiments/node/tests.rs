//! The node experiment's unit tests.

use super::*;
use crate::workloads::alibaba::Qos;

#[test]
fn water_filling_gives_by_weight_and_caps_at_one_gpu() {
    // 3 units among weights 1, 1, 4 capped at 1 each: 1, 1, 1
    let g = water_fill(3.0, &[(1.0, 1.0), (1.0, 1.0), (4.0, 1.0)]);
    assert!(g.iter().all(|x| (x - 1.0).abs() < 1e-9), "{g:?}");
    // 2 units among 1 and 3, caps 1: the heavy one is capped, the light gets the rest
    let g = water_fill(2.0, &[(1.0, 1.0), (3.0, 1.0)]);
    assert!((g[0] - 1.0).abs() < 1e-9 && (g[1] - 1.0).abs() < 1e-9, "{g:?}");
    // 1 unit among 1 and 3, caps 1: 0.25 and 0.75
    let g = water_fill(1.0, &[(1.0, 1.0), (3.0, 1.0)]);
    assert!((g[0] - 0.25).abs() < 1e-9 && (g[1] - 0.75).abs() < 1e-9, "{g:?}");
    // an inactive claimant (cap 0) gets nothing
    let g = water_fill(1.0, &[(1.0, 0.0), (1.0, 1.0)]);
    assert_eq!(g, vec![0.0, 1.0]);
}

#[test]
fn the_workload_takes_the_traces_pods_in_order_with_their_sizes() {
    let cfg = NodeConfig::standard();
    let pods = alibaba::pods().unwrap();
    let w = workload(&cfg, &pods).unwrap();
    assert_eq!(w.tenants.len(), cfg.services + cfg.batch);
    let start = (cfg.start_day * 86_400.0) as u64;
    for t in &w.tenants {
        let pod = pods.iter().find(|p| p.name == t.pod).unwrap();
        assert!(pod.creation_s >= start && pod.num_gpu == 1);
        assert_eq!(t.gpu_milli, pod.gpu_milli);
        assert_eq!(t.class == "service", pod.qos == Qos::LatencySensitive);
    }
    // arrivals keep the trace's order, within the span
    let arrivals: Vec<f64> = w.tenants.iter().map(|t| t.arrival_s).collect();
    assert!(arrivals.iter().all(|a| (0.0..=cfg.arrival_span_s + 1e-9).contains(a)));
    let mut by_creation = w.tenants.clone();
    by_creation.sort_by_key(|t| pods.iter().find(|p| p.name == t.pod).unwrap().creation_s);
    assert!(by_creation.windows(2).all(|p| p[0].arrival_s <= p[1].arrival_s));
}

#[test]
fn the_observer_counts_a_tenant_on_a_full_gpu_as_an_oom_failure() {
    let seen = Arc::new(Mutex::new(Observed::default()));
    let mut o = Observer {
        inner: Box::new(tessera_core::policies::round_robin::RoundRobin::new(&GpuSpec::uniform(
            1,
            Bytes::gib(1),
        ))),
        slice: 1_000_000_000,
        capacity: vec![Bytes::gib(1).0],
        work: BTreeMap::new(),
        memory: [(TenantId(1), Bytes::mib(600).0), (TenantId(2), Bytes::mib(600).0)].into(),
        owner: BTreeMap::new(),
        resident: vec![Vec::new()],
        moving: BTreeMap::new(),
        seen: seen.clone(),
    };
    o.arrive(Nanos::ZERO, TenantId(1), GpuId(0));
    o.arrive(Nanos::ZERO, TenantId(1), GpuId(0)); // already resident: no change
    o.arrive(Nanos::from_secs(1), TenantId(2), GpuId(0));
    assert_eq!(seen.lock().unwrap().crashes.len(), 1);
    o.leave(TenantId(1), None);
    o.arrive(Nanos::from_secs(2), TenantId(2), GpuId(0));
    assert_eq!(seen.lock().unwrap().crashes.len(), 1, "fits once tenant 1 left");
}
