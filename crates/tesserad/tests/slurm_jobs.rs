//! Slurm jobs in the daemon, without Slurm: what a Prolog reports becomes a job whose
//! tenants get its GPUs, weight and class within its memory entitlement; only its uid
//! registers under it; its end closes its tenants and cancels their tasks.

use crate::common;

use std::time::Duration;
use tessera_client::proto::{ErrorCode, JobGrant, TenantClass};
use tessera_client::{Client, ClientError, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{BalanceName, DaemonConfig, OverEntitlement, PolicyName, SlurmSection};

const MIB: u64 = 1 << 20;

fn config() -> DaemonConfig {
    common::config(PolicyName::Fair)
}

fn grant(job: u64, uid: u32, gpus: Vec<u32>, shards: u32) -> JobGrant {
    JobGrant {
        job,
        uid,
        gpus,
        shards,
        partition: "debug".into(),
        qos: String::new(),
        comment: String::new(),
    }
}

fn under(job: u64, memory: u64) -> TenantOptions {
    TenantOptions { job: Some(job), memory, ..TenantOptions::batch() }
}

fn code(e: ClientError) -> ErrorCode {
    match e {
        ClientError::Refused { code, .. } => code,
        other => panic!("not a refusal: {other}"),
    }
}

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[test]
fn a_jobs_tenants_get_its_share_and_leave_with_it() {
    let cfg = config();
    let gpu_memory = cfg.gpu_memory_mib * MIB;
    let d = Daemon::start(&cfg).unwrap();
    let mut admin = Client::connect(d.socket()).unwrap();
    let job = admin
        .job_start(JobGrant {
            comment: "tessera:user-facing:90".into(),
            ..grant(11, me(), vec![1], 4)
        })
        .unwrap();
    assert_eq!((job.weight, job.memory_entitled), (4, gpu_memory / 2));
    assert_eq!((job.class, job.sla_ms), (TenantClass::UserFacing, 90));
    // the same grant again (a Prolog retried) is the same job; another grant is refused
    assert_eq!(
        admin
            .job_start(JobGrant {
                comment: "tessera:user-facing:90".into(),
                ..grant(11, me(), vec![1], 4)
            })
            .unwrap()
            .job,
        11
    );
    // bad grants name the problem
    let e = admin.job_start(grant(12, me(), vec![5], 1)).unwrap_err();
    assert!(e.to_string().contains("GPU 5 does not exist"), "{e}");

    let mut c = Client::connect(d.socket()).unwrap();
    let (t, gpus) = c.register_placed(under(11, gpu_memory / 4), 0).unwrap();
    assert_eq!(gpus, vec![1], "the job's GPU");
    // another grant for a job id with open tenants is refused (one without any, a
    // requeued job whose Epilog never came, is replaced)
    let e = admin.job_start(grant(11, me(), vec![0], 4)).unwrap_err();
    assert_eq!(code(e), ErrorCode::BadRequest);
    let st = admin.status().unwrap();
    let rep = st.tenants.iter().find(|x| x.tenant == t).unwrap();
    assert_eq!(
        (rep.job, rep.weight, rep.class, rep.sla_ms),
        (Some(11), 4, TenantClass::UserFacing, 90)
    );
    assert_eq!(st.jobs.len(), 1);
    assert_eq!(st.jobs[0].tenants, vec![t]);
    assert_eq!(st.slurm_shards_per_gpu, 8);

    // more than the job has left of its entitlement: refused, saying why
    let e = c.register(under(11, gpu_memory / 4 + 1)).unwrap_err();
    assert!(e.to_string().contains("entitle it to"), "{e}");
    assert_eq!(code(e), ErrorCode::NoCapacity);
    // another uid's job, and a job that is not here
    admin.job_start(grant(13, me() + 4242, vec![0], 2)).unwrap();
    assert_eq!(code(c.register(under(13, 0)).unwrap_err()), ErrorCode::Forbidden);
    assert_eq!(code(c.register(under(99, 0)).unwrap_err()), ErrorCode::UnknownTenant);

    // its tasks run on its GPU only
    let short = TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(20),
        memory: 0,
        input: vec![],
        output_len: 0,
    };
    for _ in 0..4 {
        let h = c.submit(t, &short).unwrap();
        assert_eq!(c.wait(h, Duration::from_secs(5)).unwrap().gpu, Some(1));
    }
    // the job ends with a task queued behind a running one: both end, the tenant is gone
    let long = TaskRequest { cost: Duration::from_secs(20), ..short };
    let a = c.submit(t, &long).unwrap();
    let b = c.submit(t, &long).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(admin.job_end(11).unwrap(), 1);
    for h in [a, b] {
        let done = c.wait(h, Duration::from_secs(5)).unwrap();
        assert!(matches!(done.outcome, Outcome::Cancelled(_) | Outcome::Failed(_)), "{done:?}");
    }
    let st = admin.status().unwrap();
    assert!(st.tenants.iter().all(|x| x.job != Some(11)), "{:?}", st.tenants);
    assert!(st.jobs.iter().all(|j| j.job != 11));
    assert_eq!(admin.job_end(11).unwrap(), 0, "ending twice is harmless");
    assert_eq!(code(c.register(under(11, 0)).unwrap_err()), ErrorCode::UnknownTenant);
}

/// A job's memory entitlement holds whatever its programs declare: two tenants of a
/// 2-shard job (a quarter of a GPU) that declared nothing reserve, through the daemon,
/// up to the job's entitlement together and no more; the memory view they get is the
/// job's; a closed tenant's memory comes back to the job. Before, a tenant that
/// declared nothing (`TESSERA_MEMORY` unset) could take the whole GPU.
#[test]
fn a_jobs_memory_entitlement_is_enforced_whatever_its_programs_declare() {
    let cfg = config();
    let gpu_memory = cfg.gpu_memory_mib * MIB;
    let entitled = gpu_memory * 2 / 8;
    let d = Daemon::start(&cfg).unwrap();
    let mut admin = Client::connect(d.socket()).unwrap();
    admin.job_start(grant(21, me(), vec![0], 2)).unwrap();
    let mut a = Client::connect(d.socket()).unwrap();
    let mut b = Client::connect(d.socket()).unwrap();
    let ta = a.register(under(21, 0)).unwrap();
    let tb = b.register(under(21, 0)).unwrap();
    let mut desk = Client::connect_control(d.socket()).unwrap();
    desk.reserve(ta, 0, entitled - 10 * MIB, Some(Duration::ZERO), false).unwrap();
    let e = desk.reserve(tb, 0, 20 * MIB, Some(Duration::ZERO), false).unwrap_err();
    assert!(e.to_string().contains("entitlement"), "{e}");
    assert_eq!(code(e), ErrorCode::NoMemory);
    desk.reserve(tb, 0, 10 * MIB, Some(Duration::ZERO), false).unwrap();
    assert_eq!(desk.memory_info(tb, 0).unwrap(), (0, entitled), "the job's view");
    // a tenant that closes gives its part back to the job
    drop(a);
    let t = std::time::Instant::now();
    while desk.reserve(tb, 0, 20 * MIB, Some(Duration::ZERO), false).is_err() {
        assert!(t.elapsed() < Duration::from_secs(5), "the closed tenant's memory never came back");
        std::thread::sleep(Duration::from_millis(10));
    }
    admin.job_end(21).unwrap();
}

/// A job's weight belongs to the job (under `fair`): a 2-shard job running four
/// processes and a 4-shard job running one, all keeping the one GPU busy, receive GPU
/// time about 2 : 4. Before, each of the four processes had weight 2 and their job
/// received about 8 : 4 (2.01x the 4-shard job, where shards say 0.5x).
#[test]
fn a_jobs_weight_is_shared_by_its_processes() {
    let cfg = DaemonConfig {
        executor: tesserad::config::ExecutorKind::Emulated { speedup: 20.0 },
        ..common::config(PolicyName::Fair)
    };
    let d = Daemon::start(&cfg).unwrap();
    let mut admin = Client::connect(d.socket()).unwrap();
    admin.job_start(grant(31, me(), vec![0], 2)).unwrap();
    admin.job_start(grant(32, me(), vec![0], 4)).unwrap();
    let task = TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(20),
        memory: 0,
        input: vec![],
        output_len: 0,
    };
    // each process keeps two tasks in flight for the same wall time
    let run = |job: u64| {
        let socket = d.socket().to_path_buf();
        let task = task.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            let t = c.register(under(job, 0)).unwrap();
            let until = std::time::Instant::now() + Duration::from_secs(3);
            let mut inflight = 0;
            while std::time::Instant::now() < until {
                while inflight < 2 {
                    c.submit(t, &task).unwrap();
                    inflight += 1;
                }
                c.wait_any(Duration::from_secs(10)).unwrap();
                inflight -= 1;
            }
            while inflight > 0 {
                c.wait_any(Duration::from_secs(10)).unwrap();
                inflight -= 1;
            }
            let st = c.status().unwrap();
            st.tenants.iter().find(|x| x.tenant == t).map_or(0.0, |x| x.gpu_ms)
        })
    };
    let small: Vec<_> = (0..4).map(|_| run(31)).collect();
    let big = run(32);
    let small_ms: f64 = small.into_iter().map(|h| h.join().unwrap()).sum();
    let big_ms = big.join().unwrap();
    let ratio = small_ms / big_ms;
    assert!(
        (0.35..=0.7).contains(&ratio),
        "2-shard job : 4-shard job received {small_ms:.0} : {big_ms:.0} ms = {ratio:.2} (shards: 0.5)"
    );
}

/// On a node configured for Slurm (a `[slurm]` section), only jobs' tenants register
/// unless the operator says otherwise; a node without one is open as before.
#[test]
fn a_slurm_node_requires_jobs_by_default() {
    let slurm: DaemonConfig = toml::from_str("[slurm]\nshards_per_gpu = 4\n").unwrap();
    assert!(slurm.slurm.require_job);
    let open: DaemonConfig = toml::from_str("gpus = 2\n").unwrap();
    assert!(!open.slurm.require_job);
    let chosen: DaemonConfig = toml::from_str("[slurm]\nrequire_job = false\n").unwrap();
    assert!(!chosen.slurm.require_job);
}

/// `over_entitlement = "wait"`: a registration over what the job has left is answered
/// when a sibling closes, and refused if the job ends first.
#[test]
fn a_registration_over_the_entitlement_waits_for_room() {
    let cfg = DaemonConfig {
        slurm: SlurmSection { over_entitlement: OverEntitlement::Wait, ..SlurmSection::default() },
        ..config()
    };
    let gpu_memory = cfg.gpu_memory_mib * MIB;
    let d = Daemon::start(&cfg).unwrap();
    let mut admin = Client::connect(d.socket()).unwrap();
    let job = admin.job_start(grant(21, me(), vec![0], 2)).unwrap();
    assert_eq!(job.memory_entitled, gpu_memory / 4);
    let mut first = Client::connect(d.socket()).unwrap();
    let t1 = first.register(under(21, job.memory_entitled)).unwrap();
    let socket = d.socket().to_path_buf();
    let waiter = std::thread::spawn(move || {
        let mut second = Client::connect(&socket).unwrap();
        let r = second.register(under(21, job.memory_entitled / 2));
        (r.map_err(|e| e.to_string()), std::time::Instant::now(), second)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(admin.job_info(21).unwrap().waiting, 1);
    let closed_at = std::time::Instant::now();
    first.close(t1).unwrap();
    let (r, answered_at, _second) = waiter.join().unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert!(answered_at >= closed_at, "answered only once room was made");
    // one that can never fit (more than the whole entitlement) is refused at once
    let e = first.register(under(21, job.memory_entitled + 1)).unwrap_err();
    assert_eq!(code(e), ErrorCode::NoCapacity);
    // one waiting when the job ends is refused
    let socket = d.socket().to_path_buf();
    let waiter = std::thread::spawn(move || {
        let mut third = Client::connect(&socket).unwrap();
        third.register(under(21, job.memory_entitled)).map_err(code)
    });
    std::thread::sleep(Duration::from_millis(300));
    admin.job_end(21).unwrap();
    assert_eq!(waiter.join().unwrap(), Err(ErrorCode::UnknownTenant));
}

/// Under every policy that takes Slurm jobs, two jobs pinned to different GPUs — one
/// of them user-facing — and a tenant of no job all see their tasks end, each job's on
/// its GPU only (a policy that ignored the pinning looped for ever or left them
/// queued); the other policies refuse jobs with the reason.
#[test]
fn every_policy_runs_pinned_jobs_on_their_gpus_or_refuses_them() {
    let mut configs: Vec<(String, DaemonConfig)> = [
        PolicyName::RoundRobin,
        PolicyName::LeastLoaded,
        PolicyName::Fair,
        PolicyName::Credit,
        PolicyName::Node,
    ]
    .into_iter()
    .map(|p| (format!("{p:?}"), common::config(p)))
    .collect();
    configs.push((
        "LeastLoaded with DCUDA".into(),
        DaemonConfig { balance: BalanceName::Dcuda, ..common::config(PolicyName::LeastLoaded) },
    ));
    for (policy, cfg) in configs {
        let d = Daemon::start(&cfg).unwrap();
        let mut admin = Client::connect(d.socket()).unwrap();
        admin.job_start(grant(31, me(), vec![1], 4)).unwrap();
        admin
            .job_start(JobGrant {
                comment: "tessera:user-facing:500".into(),
                ..grant(32, me(), vec![0], 2)
            })
            .unwrap();
        let mut c = Client::connect(d.socket()).unwrap();
        let on1 = c.register(under(31, 0)).unwrap();
        let on0 = c.register(under(32, 0)).unwrap();
        // a tenant of no job beside them, to compete for the GPUs
        let other = c.register(TenantOptions::batch()).unwrap();
        let task = TaskRequest {
            kernel: 1,
            cost: Duration::from_millis(30),
            memory: 0,
            input: vec![],
            output_len: 0,
        };
        // the two jobs alone first: each GPU idle, each job's task fits only the other
        // GPU than round-robin order would give it
        let mut hs = vec![
            (c.submit(on1, &task).unwrap(), Some(1)),
            (c.submit(on0, &task).unwrap(), Some(0)),
        ];
        for _ in 0..5 {
            for (t, gpu) in [(on1, Some(1)), (on0, Some(0)), (other, None)] {
                hs.push((c.submit(t, &task).unwrap(), gpu));
            }
        }
        for (h, gpu) in hs {
            let done =
                c.wait(h, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{policy}: {e}"));
            assert_eq!(done.outcome, Outcome::Done, "{policy}");
            if gpu.is_some() {
                assert_eq!(done.gpu, gpu, "{policy}");
            }
        }
    }
    for policy in [PolicyName::Flexy, PolicyName::FlexyPid, PolicyName::Priority] {
        let d = Daemon::start(&common::config(policy)).unwrap();
        let e = Client::connect(d.socket()).unwrap().job_start(grant(41, me(), vec![0], 1));
        let e = e.unwrap_err();
        assert!(e.to_string().contains("cannot keep a Slurm job on its GPUs"), "{policy:?}: {e}");
    }
}

/// A job's weight is its shards: its tenants cannot raise it; with `require_job`, a
/// user's tenant outside any job is refused.
#[test]
fn a_jobs_weight_is_fixed_and_require_job_keeps_others_out() {
    let cfg = DaemonConfig {
        slurm: SlurmSection { require_job: true, ..SlurmSection::default() },
        ..config()
    };
    let d = Daemon::start(&cfg).unwrap();
    let mut admin = Client::connect(d.socket()).unwrap();
    admin.job_start(grant(51, me(), vec![0], 2)).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(under(51, 0)).unwrap();
    assert_eq!(code(c.set_weight(t, 1000).unwrap_err()), ErrorCode::Forbidden);
    // root and the daemon's user may still register outside jobs (this test is one of
    // them); the refusal of others is checked with a real second user in
    // crates/tessera/tests/slurm.rs
    assert!(c.register(TenantOptions::batch()).is_ok());
}

/// One job may park at most 64 registrations; the 65th is refused at once, and the
/// job's end refuses the parked ones.
#[test]
fn a_job_parks_a_bounded_number_of_registrations() {
    let cfg = DaemonConfig {
        slurm: SlurmSection { over_entitlement: OverEntitlement::Wait, ..SlurmSection::default() },
        max_conns_per_uid: 256,
        ..config()
    };
    let d = Daemon::start(&cfg).unwrap();
    let mut admin = Client::connect(d.socket()).unwrap();
    let job = admin.job_start(grant(61, me(), vec![0], 1)).unwrap();
    let mut holder = Client::connect(d.socket()).unwrap();
    holder.register(under(61, job.memory_entitled)).unwrap();
    let waiters: Vec<_> = (0..64)
        .map(|_| {
            let socket = d.socket().to_path_buf();
            std::thread::spawn(move || {
                Client::connect(&socket).unwrap().register(under(61, 1)).map_err(code)
            })
        })
        .collect();
    let t = std::time::Instant::now();
    while admin.job_info(61).unwrap().waiting < 64 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admin.job_info(61).unwrap().waiting, 64);
    let mut late = Client::connect(d.socket()).unwrap();
    assert_eq!(code(late.register(under(61, 1)).unwrap_err()), ErrorCode::NoCapacity);
    admin.job_end(61).unwrap();
    for w in waiters {
        assert_eq!(w.join().unwrap(), Err(ErrorCode::UnknownTenant));
    }
}

/// With `departed_running = "finish"`, a task whose client left runs on; the job's
/// end stops it too: nothing of a job outlives it.
#[test]
fn a_jobs_end_stops_tasks_its_departed_clients_left_running() {
    let cfg = DaemonConfig { departed_running: tesserad::config::Departed::Finish, ..config() };
    let d = Daemon::start(&cfg).unwrap();
    let mut admin = Client::connect(d.socket()).unwrap();
    admin.job_start(grant(71, me(), vec![1], 2)).unwrap();
    {
        let mut c = Client::connect(d.socket()).unwrap();
        let t = c.register(under(71, 0)).unwrap();
        let long = TaskRequest {
            kernel: 1,
            cost: Duration::from_secs(60),
            memory: 0,
            input: vec![],
            output_len: 0,
        };
        c.submit(t, &long).unwrap();
        std::thread::sleep(Duration::from_millis(200));
    } // the client leaves; its task runs on
    let busy = |admin: &mut Client| !admin.status().unwrap().gpus[1].running.is_empty();
    std::thread::sleep(Duration::from_millis(200));
    assert!(busy(&mut admin), "the departed client's task runs on");
    admin.job_end(71).unwrap();
    let t = std::time::Instant::now();
    while busy(&mut admin) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!busy(&mut admin), "the job's end stopped it");
}
