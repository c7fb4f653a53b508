//! The CUDA executor against a fake driver library (`fake_libcuda.c`, built here with
//! the system C compiler). This exercises loading, device discovery, argument passing
//! and the task path; it cannot say whether the PTX kernels run on a real GPU.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use tessera_client::proto::TenantClass;
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

fn fake_driver() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let lib = dir.join(format!("libcuda-fake-{}.so", std::process::id()));
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake_libcuda.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the fake driver:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

fn config(tag: &str, library: Option<PathBuf>) -> DaemonConfig {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ledger = dir.join(format!("cuda-ledger-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&ledger);
    DaemonConfig {
        socket: dir.join(format!("cuda-{tag}-{}.sock", std::process::id())),
        ledger,
        executor: ExecutorKind::Cuda { library },
        policy: PolicyName::Priority,
        reserve: 0,
        ..DaemonConfig::default()
    }
}

#[test]
fn tasks_run_through_the_cuda_executor_on_a_fake_driver() {
    let d = Daemon::start(&config("ok", Some(fake_driver()))).unwrap();
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
}

#[test]
fn cuda_without_a_driver_fails_clearly() {
    let err = Daemon::start(&config("none", Some(PathBuf::from("/nonexistent/libcuda.so.1"))))
        .unwrap_err();
    assert!(err.to_string().contains("no CUDA driver"), "{err}");
}
