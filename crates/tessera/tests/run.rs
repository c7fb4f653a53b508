//! `tessera run`: an unmodified CUDA program started as a tenant, on the fake driver
//! (NVIDIA's `cuda.h`; skipped with the reason where it cannot be fetched).

use std::path::{Path, PathBuf};
use std::process::Command;
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

#[test]
fn tessera_run_makes_a_program_a_tenant_with_its_settings() {
    let Some(artifacts) = tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h") else {
        return;
    };
    // built by the workspace's test run (`cargo test --workspace`) into the same place
    let preload = std::env::current_exe().unwrap().parent().unwrap().join("libtessera_cuda.so");
    if !preload.is_file() {
        eprintln!("SKIPPED: {} is not built (run the workspace's tests)", preload.display());
        return;
    }
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    tessera_driver::testing::build_fake_driver(&artifacts, &dir.join("libcuda.so.1")).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tessera-cuda/tests/driver_app.c");
    let app = tessera_driver::testing::build_c_program(&artifacts, &src, &dir.join("driver_app"))
        .unwrap();
    let socket = dir.join("d.sock");
    let ledger = dir.join("ledger");
    let daemon = Daemon::start(&DaemonConfig {
        socket: socket.clone(),
        ledger: ledger.clone(),
        gpus: 2,
        gpu_memory_mib: 1024,
        executor: ExecutorKind::Emulated { speedup: 10.0 },
        policy: PolicyName::RoundRobin,
        ..DaemonConfig::default()
    })
    .unwrap();
    let tessera = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .arg("run")
            .arg("--preload")
            .arg(&preload)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env("LD_LIBRARY_PATH", &dir)
            .env("TESSERA_LEDGER", &ledger)
            .output()
            .unwrap()
    };
    let app = app.to_str().unwrap();
    // within its limit: runs, and its share is what --memory said
    let out = tessera(&["--memory", "512MiB", "--", app, "meminfo", "100"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("meminfo 536870912 536870912"), "{stdout}");
    // over it: the program's own allocation fails with CUDA_ERROR_OUT_OF_MEMORY, and
    // its exit status is the program's (2), not tessera's
    let out = tessera(&["--memory", "256MiB", "--", app, "alloc", "300", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("error alloc 2"));
    // a bad value is the interposer's to report, in one line
    let out = tessera(&["--memory", "lots", "--", app, "alloc", "1", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TESSERA_MEMORY"));
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
