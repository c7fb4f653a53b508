//! DCUDA through the daemon (`balance = "dcuda"`): four emulated GPUs, two busy tenants
//! placed on the same GPU on purpose (round-robin placement, the fifth registration
//! lands where the first did), the balancer moves one of them between its tasks, and
//! every task of both still completes, in order.

use std::collections::BTreeMap;
use std::time::Duration;
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{BalanceName, PolicyName};

use crate::common;

#[test]
fn the_balancer_moves_a_tenant_off_an_overloaded_gpu_and_every_task_completes_in_order() {
    let cfg = tesserad::config::DaemonConfig {
        gpus: 4,
        balance: BalanceName::Dcuda,
        ring_slots: 256,
        ..common::config(PolicyName::RoundRobin)
    };
    let d = Daemon::start(&cfg).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    // round-robin placement: tenants 1 and 5 share GPU 0; 2, 3, 4 and 6 stay idle
    // each declares 600 MB: a move brings it over PCIe (12 GB/s: 50 ms) during the
    // tenant's first task on its new GPU
    let declared = TenantOptions { memory: 600_000_000, ..TenantOptions::batch() };
    let tenants: Vec<u64> = (0..6).map(|_| c.register(declared).unwrap()).collect();
    let busy = [tenants[0], tenants[4]];
    let task = TaskRequest {
        kernel: 0,
        cost: Duration::from_millis(100),
        memory: 0,
        input: Vec::new(),
        output_len: 0,
    };
    let per_tenant = 40;
    let mut owner: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for i in 0..per_tenant {
        for t in busy {
            let h = c.submit(t, &task).unwrap();
            owner.insert(h, (t, i));
        }
    }
    let mut seen: BTreeMap<u64, Vec<(usize, Option<u32>, Duration)>> = BTreeMap::new();
    for _ in 0..2 * per_tenant {
        let done = c.wait_any(Duration::from_secs(60)).expect("every task ends");
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        let (t, i) = owner[&done.handle];
        seen.entry(t).or_default().push((i, done.gpu, done.ran));
    }
    for (t, runs) in &seen {
        let order: Vec<usize> = runs.iter().map(|r| r.0).collect();
        assert_eq!(order, (0..per_tenant).collect::<Vec<_>>(), "tenant {t} in order");
    }
    // one of the two left GPU 0, between its tasks, and stayed off it
    let moved: Vec<&u64> = seen
        .iter()
        .filter(|(_, runs)| runs.last().is_some_and(|r| r.1 != Some(0)))
        .map(|(t, _)| t)
        .collect();
    assert_eq!(moved.len(), 1, "exactly one busy tenant moved: {seen:?}");
    // its first task on the new GPU ran for its 100 ms of work plus the data's 50 ms
    // (a run measures at least its work: a loaded machine only lengthens it)
    let runs = &seen[moved[0]];
    let first = runs.iter().position(|r| r.1 != Some(0)).unwrap();
    let arrived = runs[first].2;
    assert!(arrived >= Duration::from_millis(148), "{arrived:?} for the first task after the move");
    let s = c.status().unwrap();
    assert!(s.totals.migrations >= 1, "{:?}", s.totals);
    let b = s.balance.expect("a balancing daemon reports its balancer");
    assert!(
        b.recent
            .iter()
            .any(|m| m.from == 0 && m.reason == "balance" && m.tenant == Some(*moved[0])),
        "{b:?}"
    );
    assert!(s.gpus.iter().all(|g| g.load.is_some()), "every GPU's state is shown");
    // a bad balance configuration is refused with a reason
    let bad = tesserad::config::DaemonConfig {
        balance: BalanceName::Dcuda,
        ..common::config(PolicyName::Flexy)
    };
    assert!(bad.validate().unwrap_err().to_string().contains("least-loaded"));
}
