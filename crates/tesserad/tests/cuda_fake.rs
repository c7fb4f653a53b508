//! The CUDA executor against a fake driver library (`fake_libcuda.c`, built here with
//! the system C compiler). This exercises loading, device discovery, argument passing
//! and the task path; it cannot say whether the PTX kernels run on a real GPU.

use std::path::PathBuf;
use std::time::Duration;
use tessera_client::proto::TenantClass;
use tessera_client::region::reason;
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

/// Build the fake driver (`tessera-driver/fake/fake_libcuda.c`, compiled against
/// NVIDIA's real `cuda.h`) as a library of its own for test `tag` (each path is loaded
/// as a separate copy, with its own books); `None`, with the reason printed, where
/// NVIDIA's header cannot be fetched — the test then skips.
fn fake_driver(tag: &str) -> Option<PathBuf> {
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h")?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let lib = dir.join(format!("libcuda-fake-{tag}-{}.so", std::process::id()));
    Some(tessera_driver::testing::build_fake_driver(&artifacts, &lib).unwrap())
}

fn config(tag: &str, library: Option<PathBuf>) -> DaemonConfig {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ledger = dir.join(format!("cuda-ledger-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&ledger);
    // each test's own claim on the fake's GPUs (on a node: /dev/shm, node-wide)
    let gpu_lock_dir = dir.join(format!("cuda-gpus-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&gpu_lock_dir).unwrap();
    DaemonConfig {
        socket: dir.join(format!("cuda-{tag}-{}.sock", std::process::id())),
        ledger,
        gpu_lock_dir,
        executor: ExecutorKind::Cuda { library, gpus: None },
        policy: PolicyName::Priority,
        reserve: 0,
        ..DaemonConfig::default()
    }
}

/// The fake driver's books: (primary-context retains, live allocations, peak bytes)
/// per device.
#[derive(Debug, PartialEq)]
struct Books {
    retains: [i64; 2],
    live: [i64; 2],
    peak_bytes: [i64; 2],
}

fn books(lib: &std::path::Path) -> Books {
    let mut path = lib.as_os_str().to_owned();
    path.push(".stats");
    let text = std::fs::read_to_string(&path).unwrap();
    let row = |name: &str| -> [i64; 2] {
        let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap();
        let v: Vec<i64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
        [v[0], v[1]]
    };
    Books { retains: row("retains"), live: row("live"), peak_bytes: row("peak_bytes") }
}

fn uf() -> TenantOptions {
    TenantOptions {
        class: TenantClass::UserFacing,
        sla: Duration::from_millis(200),
        weight: 1,
        priority: 0,
        memory: 0,
        job: None,
        token: None,
    }
}

fn spin(ms: u64, memory: u64) -> TaskRequest {
    TaskRequest {
        kernel: 0,
        cost: Duration::from_millis(ms),
        memory,
        input: vec![1],
        output_len: 1,
    }
}

/// A sticky error (a kernel fault) fails its task and resets the context, so that the
/// GPU runs later tasks; before, every later task on that GPU failed.
#[test]
fn a_sticky_error_is_followed_by_a_context_reset() {
    let Some(lib) = fake_driver("sticky") else { return };
    let d =
        Daemon::start(&DaemonConfig { gpus: 1, ..config("sticky", Some(lib.clone())) }).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(uf()).unwrap();
    let bad = c.submit(t, &spin(777, 0)).unwrap(); // the fake faults on this one
    assert_eq!(
        c.wait(bad, Duration::from_secs(20)).unwrap().outcome,
        Outcome::Failed(reason::EXECUTOR)
    );
    for _ in 0..6 {
        let h = c.submit(t, &spin(1, 1 << 20)).unwrap();
        assert_eq!(
            c.wait(h, Duration::from_secs(20)).unwrap().outcome,
            Outcome::Done,
            "the GPU recovered"
        );
    }
    drop(c);
    d.shutdown();
    let b = books(&lib);
    assert_eq!((b.retains, b.live), ([0, 0], [0, 0]), "released and freed: {b:?}");
}

/// The memory a task declares is allocated on the device for its run; retains and
/// allocations are balanced through resets (a departed client's running task is
/// cancelled with one) and through the stop.
#[test]
fn declared_memory_is_allocated_and_the_books_balance_through_resets() {
    let Some(lib) = fake_driver("books") else { return };
    let d = Daemon::start(&config("books", Some(lib.clone()))).unwrap();
    {
        let mut hog = Client::connect(d.socket()).unwrap();
        let t = hog.register(uf()).unwrap();
        hog.submit(t, &spin(30_000, 512 << 20)).unwrap();
        let t0 = std::time::Instant::now();
        while books(&lib).peak_bytes.iter().all(|&b| b < 512 << 20) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the declared memory was never allocated"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    } // the hog leaves: its running task is cancelled and its GPU reset
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(uf()).unwrap();
    for _ in 0..4 {
        let h = c.submit(t, &spin(1, 1 << 20)).unwrap();
        assert_eq!(c.wait(h, Duration::from_secs(20)).unwrap().outcome, Outcome::Done);
    }
    assert!(c.status().unwrap().totals.resets >= 1, "the hog's GPU was reset");
    drop(c);
    d.shutdown();
    let b = books(&lib);
    assert_eq!((b.retains, b.live), ([0, 0], [0, 0]), "released and freed: {b:?}");
}

#[test]
fn tasks_run_through_the_cuda_executor_on_a_fake_driver() {
    let Some(lib) = fake_driver("ok") else { return };
    let d = Daemon::start(&config("ok", Some(lib.clone()))).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let s = c.status().unwrap();
    assert!(s.executor.starts_with("cuda (2 devices"), "{}", s.executor);
    assert_eq!(
        s.gpus.iter().map(|g| g.memory_total).collect::<Vec<_>>(),
        vec![1 << 30, 2 << 30],
        "memory from the driver"
    );
    let t = c
        .register(TenantOptions {
            class: TenantClass::UserFacing,
            sla: Duration::from_millis(200),
            weight: 1,
            priority: 0,
            memory: 0,
            job: None,
            token: None,
        })
        .unwrap();
    let hs: Vec<u64> = (0..6)
        .map(|i| {
            let input = format!("task{i}-").into_bytes();
            c.submit(
                t,
                &TaskRequest {
                    kernel: 0,
                    cost: Duration::from_millis(5),
                    memory: 1 << 20,
                    input,
                    output_len: 600,
                },
            )
            .unwrap()
        })
        .collect();
    for (i, h) in hs.into_iter().enumerate() {
        let done = c.wait(h, Duration::from_secs(20)).unwrap();
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        let expect: Vec<u8> =
            format!("task{i}-").into_bytes().into_iter().cycle().take(600).collect();
        assert_eq!(
            done.output, expect,
            "the echo kernel's output came back through the device buffers"
        );
        assert!(done.ran >= Duration::from_millis(5), "the spin kernel ran for the task's cost");
    }
    drop(c);
    d.shutdown();
    let b = books(&lib);
    assert_eq!((b.retains, b.live), ([0, 0], [0, 0]), "released and freed: {b:?}");
    assert!(b.peak_bytes.iter().any(|&p| p >= 1 << 20), "the declared 1 MiB was allocated: {b:?}");
}

#[test]
fn cuda_without_a_driver_fails_clearly() {
    let err = Daemon::start(&config("none", Some(PathBuf::from("/nonexistent/libcuda.so.1"))))
        .unwrap_err();
    assert!(err.to_string().contains("no CUDA driver"), "{err}");
}

/// The executor's built-in PTX assembles with NVIDIA's `ptxas` for Volta, Ampere and
/// Hopper (sm_70, sm_80, sm_90): the fake driver cannot say whether it is valid PTX.
#[test]
fn the_builtin_ptx_assembles_for_sm_70_80_90() {
    let Some(artifacts) = tessera_driver::testing::nvidia_artifacts_or_skip("ptxas") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ptx = dir.join(format!("builtin-{}.ptx", std::process::id()));
    std::fs::write(&ptx, tesserad::BUILTIN_PTX).unwrap();
    for arch in ["sm_70", "sm_80", "sm_90"] {
        let cubin = dir.join(format!("builtin-{arch}-{}.cubin", std::process::id()));
        let out = std::process::Command::new(artifacts.join("bin/ptxas"))
            .arg(format!("-arch={arch}"))
            .arg(&ptx)
            .arg("-o")
            .arg(&cubin)
            .output()
            .unwrap();
        assert!(out.status.success(), "ptxas {arch}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::metadata(&cubin).unwrap().len() > 0);
        let _ = std::fs::remove_file(&cubin);
    }
    let _ = std::fs::remove_file(&ptx);
}

/// The node policy on the CUDA executor (a fake driver with two devices): before, the
/// daemon refused `policy = "node"` on real GPUs, since it migrates; now it runs,
/// homing batch tenants without moving them, and refuses a model (partitions are
/// emulated only). An SLA tenant and two batch tenants of weights 1 and 3 all finish
/// their tasks, nothing migrates, and the books balance.
#[test]
fn the_node_policy_runs_on_the_cuda_executor_without_migrating() {
    let Some(lib) = fake_driver("node") else { return };
    let cfg =
        DaemonConfig { policy: PolicyName::Node, reserve: 1, ..config("node", Some(lib.clone())) };
    let d = Daemon::start(&cfg).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    assert!(c.register_model("m", "resnet50", Duration::from_millis(100)).is_err());
    let service = c.register(uf()).unwrap();
    let batch: Vec<u64> = [1, 3]
        .into_iter()
        .map(|weight| {
            let options =
                TenantOptions { class: TenantClass::Batch, weight, memory: 1 << 20, ..uf() };
            c.register(options).unwrap()
        })
        .collect();
    let mut handles = Vec::new();
    for _ in 0..5 {
        handles.push(c.submit(service, &spin(2, 0)).unwrap());
        for t in &batch {
            handles.push(c.submit(*t, &spin(5, 1 << 20)).unwrap());
        }
    }
    for h in handles {
        let done = c.wait(h, Duration::from_secs(20)).unwrap();
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
    }
    let s = c.status().unwrap();
    assert_eq!(s.balance.map_or(0, |b| b.migrations), 0, "nothing moves on real GPUs");
    drop(c);
    d.shutdown();
    let b = books(&lib);
    assert_eq!((b.retains, b.live), ([0, 0], [0, 0]), "released and freed: {b:?}");
}
