//! Kubernetes containers' allocations in the daemon, without a kubelet (issue 54, item
//! 2): what the device plugin's `Allocate` asks for becomes an allocation whose
//! processes, presenting its token, share its memory on its GPU with its weight —
//! whatever else they ask; a token the daemon did not give, or the allocation's id
//! without its token, is refused; its end closes its tenants.

use crate::common;

use tessera_client::pod::{PodGrant, Token};
use tessera_client::proto::ErrorCode;
use tessera_client::{Client, ClientError, TenantOptions};
use tesserad::Daemon;
use tesserad::config::PolicyName;

const MIB: u64 = 1 << 20;

fn code(e: ClientError) -> ErrorCode {
    match e {
        ClientError::Refused { code, .. } => code,
        other => panic!("not a refusal: {other}"),
    }
}

fn with(token: Token, memory: u64) -> TenantOptions {
    TenantOptions { token: Some(token), memory, ..TenantOptions::batch() }
}

#[test]
fn a_pods_processes_share_its_allocation_and_nothing_else_enters_it() {
    let cfg = common::config(PolicyName::Fair);
    let gpu = cfg.gpu_memory_mib * MIB;
    let unit = gpu / 4;
    let d = Daemon::start(&cfg).unwrap();
    let mut plugin = Client::connect(d.socket()).unwrap();
    let (a, b) = (Token::random().unwrap(), Token::random().unwrap());
    let grant_a =
        PodGrant { token: a, gpu: 1, memory: 2 * unit, weight: 3, name: "ns-a/a/main".into() };
    let ja = plugin.pod_start(grant_a.clone()).unwrap();
    let jb = plugin
        .pod_start(PodGrant {
            token: b,
            gpu: 1,
            memory: unit,
            weight: 1,
            name: "ns-b/b/main".into(),
        })
        .unwrap();
    assert_eq!((ja.gpus.as_slice(), ja.memory_entitled, ja.weight), (&[1][..], 2 * unit, 3));
    assert_ne!(ja.job, jb.job);
    // the plugin's retry is the same allocation; the same token with another grant is not
    assert_eq!(plugin.pod_start(grant_a.clone()).unwrap().job, ja.job);
    let e = plugin.pod_start(PodGrant { memory: unit, ..grant_a.clone() }).unwrap_err();
    assert_eq!(code(e), ErrorCode::BadRequest);
    // bad grants name what is wrong
    let e =
        plugin.pod_start(PodGrant { token: Token::random().unwrap(), gpu: 9, ..grant_a.clone() });
    assert!(e.unwrap_err().to_string().contains("GPU 9 does not exist"));

    // two processes of pod A, whatever they declared (a process's own TESSERA_MEMORY):
    // on its GPU, sharing its 2 units and no more; B's unit is B's
    let mut p1 = Client::connect(d.socket()).unwrap();
    let mut p2 = Client::connect(d.socket()).unwrap();
    let (t1, g1) = p1.register_placed(with(a, 8 * unit), 2).unwrap();
    let (t2, g2) = p2.register_placed(with(a, 0), 0).unwrap();
    assert_eq!((g1, g2), (vec![1], vec![1]), "the allocation's GPU");
    let mut q = Client::connect(d.socket()).unwrap();
    let (tq, _) = q.register_placed(with(b, 0), 0).unwrap();
    let mut desk = Client::connect_control(d.socket()).unwrap();
    let now = Some(std::time::Duration::ZERO);
    desk.reserve(t1, 1, unit + unit / 2, now, false).unwrap();
    let e = desk.reserve(t2, 1, unit, now, false).unwrap_err();
    assert_eq!(code(e), ErrorCode::NoMemory, "past A's 2 units");
    desk.reserve(t2, 1, unit / 2, now, false).expect("A's last half unit");
    assert_eq!(desk.memory_info(t2, 1).unwrap(), (0, 2 * unit), "A's view: its 2 units");
    desk.reserve(tq, 1, unit, now, false).expect("B's unit is B's");
    let e = desk.reserve(tq, 1, 1, now, false).unwrap_err();
    assert_eq!(code(e), ErrorCode::NoMemory, "past B's unit");
    let status = plugin.status().unwrap();
    let weights: Vec<u32> = status.tenants.iter().map(|t| t.weight).collect();
    assert_eq!(weights.iter().filter(|w| **w == 3).count(), 2, "A's weight: {weights:?}");
    let mut p3 = Client::connect(d.socket()).unwrap();

    // a forged token, or A's id without its token: refused
    let mut forger = Client::connect(d.socket()).unwrap();
    let e = forger.register_placed(with(Token::random().unwrap(), 1), 0).unwrap_err();
    assert_eq!(code(e), ErrorCode::Forbidden);
    let e = forger
        .register_placed(
            TenantOptions { job: Some(ja.job), memory: 1, ..TenantOptions::batch() },
            0,
        )
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Forbidden);

    // A's pod is gone: its tenants closed, its token no longer enters
    assert_eq!(plugin.pod_end(a).unwrap(), 2);
    let e = p3.register_placed(with(a, 1), 0).unwrap_err();
    assert_eq!(code(e), ErrorCode::Forbidden);
    assert_eq!(plugin.pod_end(a).unwrap(), 0, "ending it again is a no-op");
    drop(d);
}

/// The device plugin learns a pod's namespace, and so its weight, only after
/// `Allocate` (the kubelet lists the pod once its container is being made): the same
/// grant with another weight reweights the allocation and its processes already
/// running. And the daemon checks what the plugin's units promise: a GPU's pod
/// allocations never hold more than its memory.
#[test]
fn a_pods_weight_follows_the_plugin_and_its_gpu_is_never_overcommitted() {
    let cfg = common::config(PolicyName::Fair);
    let gpu = cfg.gpu_memory_mib * MIB;
    let unit = gpu / 4;
    let d = Daemon::start(&cfg).unwrap();
    let mut plugin = Client::connect(d.socket()).unwrap();
    let a = Token::random().unwrap();
    let grant = PodGrant { token: a, gpu: 0, memory: 3 * unit, weight: 1, name: "units".into() };
    plugin.pod_start(grant.clone()).unwrap();
    let mut p = Client::connect(d.socket()).unwrap();
    p.register_placed(with(a, 0), 0).unwrap();
    let named = PodGrant { weight: 4, name: "team-a/a/main".into(), ..grant.clone() };
    let r = plugin.pod_start(named).unwrap();
    assert_eq!(r.weight, 4);
    let status = plugin.status().unwrap();
    let weights: Vec<u32> = status.tenants.iter().map(|t| t.weight).collect();
    assert_eq!(weights, vec![4], "the running process's weight follows its pod's");
    let e = plugin.pod_start(PodGrant { weight: 0, ..grant.clone() }).unwrap_err();
    assert!(e.to_string().contains("weight 0 is out of 1-1000"), "{e}");
    // GPU 0 has 4 units, A holds 3: a second allocation of 2 does not fit, of 1 does
    let more = |memory| PodGrant {
        token: Token::random().unwrap(),
        gpu: 0,
        memory,
        weight: 1,
        name: "b".into(),
    };
    let e = plugin.pod_start(more(2 * unit)).unwrap_err();
    assert!(e.to_string().contains("pod allocations hold"), "{e}");
    assert_eq!(code(e), ErrorCode::NoCapacity);
    plugin.pod_start(more(unit)).expect("the last unit fits");
    // A's end gives its units back
    plugin.pod_end(a).unwrap();
    plugin.pod_start(more(3 * unit)).expect("A's units, free again");
}
