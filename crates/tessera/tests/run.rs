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
    // and it is told why, in one line
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().filter(|l| l.contains("limit is 256 MiB")).count(), 1, "{err}");
    // `tessera status` (reaching the daemon through TESSERA_SOCKET) shows a program's
    // memory as the ledger holds it, its GPU and the policy as it was named
    let mut holder = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("run")
        .arg("--preload")
        .arg(&preload)
        .arg("--socket")
        .arg(&socket)
        .args(["--", app, "alloc", "256", "5000"])
        .env("LD_LIBRARY_PATH", &dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(holder.stdout.take().unwrap());
    while !line.starts_with("allocated") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut reader, &mut line).unwrap() > 0, "no allocation");
    }
    let status = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("status")
        .env("TESSERA_SOCKET", &socket)
        .output()
        .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}{}", String::from_utf8_lossy(&status.stderr));
    assert!(text.contains("policy round-robin"), "{text}");
    let row = text
        .lines()
        .find(|l| {
            l.split_whitespace().nth(2) == Some(&rustix::process::geteuid().as_raw().to_string())
        })
        .unwrap_or_else(|| panic!("no tenant row: {text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // tenant pid uid class weight GPUs queued done failed SLA memory GPU-time...
    assert!(cells[5] == "0" || cells[5] == "1", "one GPU: {row}");
    let held: u64 = cells[10].trim_end_matches("MiB").parse().unwrap();
    assert!(held >= 256, "the ledger's figure (a 256 MiB allocation and its lease): {row}");
    // a bad size is refused where it was typed, before the program starts (before:
    // `--memory 4GB` passed and the program failed at cuInit)
    for bad in ["lots", "4GB"] {
        let out = tessera(&["--memory", bad, "--", app, "alloc", "1", "0"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("is not a size") && err.contains("4GiB"), "{err}");
        assert!(out.stdout.is_empty(), "the program did not run");
    }
    // TESSERA_MEMORY takes the same syntax, and a bad value is the interposer's to
    // report, in one line
    let mut direct = Command::new(app);
    direct
        .args(["alloc", "1", "0"])
        .env("LD_PRELOAD", &preload)
        .env("LD_LIBRARY_PATH", &dir)
        .env("TESSERA_SOCKET", &socket)
        .env("TESSERA_MEMORY", "4GB");
    let out = direct.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TESSERA_MEMORY"));
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
