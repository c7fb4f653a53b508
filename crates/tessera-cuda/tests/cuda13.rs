//! CUDA 13 beside 12.9 (issue 52, a first part): the fake driver and the fake NVML
//! compile against CUDA 13.0's `cuda.h` and `nvml.h` (from PyPI, as the 12.9 ones are),
//! and programs compiled against CUDA 13.0's `cuda.h` run under the interposer as those
//! compiled against 12.9 do: placed, their memory admitted and limited, their kernels
//! gated, their stream captures replayed, a free-and-retry after out-of-memory. Skipped,
//! with the reason, where the wheels cannot be fetched.

use std::path::{Path, PathBuf};
use std::process::Command;
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

/// A daemon on two emulated 1 GiB GPUs, and the fake driver and programs built against
/// CUDA 13.0's headers, in a directory of the test's own.
struct Cuda13 {
    dir: PathBuf,
    daemon: Option<Daemon>,
    socket: PathBuf,
}

impl Drop for Cuda13 {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn setup(tag: &str) -> Option<Cuda13> {
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip_for("13.0", "cuda.h")?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cuda13-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    tessera_driver::testing::build_fake_driver(&artifacts, &dir.join("libcuda.so.1"))
        .expect("the fake driver compiles against CUDA 13.0's cuda.h");
    tessera_driver::testing::build_fake_nvml(&artifacts, &dir.join("libnvidia-ml.so.1"))
        .expect("the fake NVML compiles against CUDA 13.0's nvml.h");
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    for app in ["driver_app", "memory_app"] {
        tessera_driver::testing::build_c_program(
            &artifacts,
            &tests.join(format!("{app}.c")),
            &dir.join(app),
        )
        .unwrap_or_else(|e| panic!("{app} against CUDA 13.0's cuda.h: {e}"));
    }
    // built for the per-thread default stream: CUDA 13's header renames its calls
    tessera_driver::testing::build_c_program_linked(
        &artifacts,
        &tests.join("ptsz_app.c"),
        &dir.join("ptsz_app"),
        &[&dir.join("libcuda.so.1")],
    )
    .unwrap_or_else(|e| panic!("ptsz_app against CUDA 13.0's cuda.h: {e}"));
    let socket = dir.join("d.sock");
    let daemon = Daemon::start(&DaemonConfig {
        socket: socket.clone(),
        ledger: dir.join("ledger"),
        gpus: 2,
        gpu_memory_mib: 1024,
        executor: ExecutorKind::Emulated { speedup: 10.0 },
        policy: PolicyName::RoundRobin,
        ..DaemonConfig::default()
    })
    .unwrap();
    Some(Cuda13 { dir, daemon: Some(daemon), socket })
}

impl Cuda13 {
    /// `app args` under the interposer with `env`: exit code and stdout, stderr.
    fn run(&self, app: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let preload = std::env::current_exe().unwrap().parent().unwrap().join("libtessera_cuda.so");
        let out = Command::new(self.dir.join(app))
            .args(args)
            .env("LD_PRELOAD", preload)
            .env("LD_LIBRARY_PATH", &self.dir)
            .env("TESSERA_SOCKET", &self.socket)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

#[test]
fn programs_built_against_cuda_13_run_under_the_interposer() {
    let Some(s) = setup("programs") else { return };
    // memory: admitted, and its share is what the limit says
    let (code, out, err) =
        s.run("driver_app", &["meminfo", "100"], &[("TESSERA_MEMORY", "512MiB")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("meminfo 536870912 536870912"), "{out}");
    // beyond the limit: out-of-memory (2), said once
    let (code, out, err) =
        s.run("driver_app", &["alloc", "300", "0"], &[("TESSERA_MEMORY", "256MiB")]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("error alloc 2"), "{out}");
    // kernels through the launch gate
    let (code, out, err) = s.run("driver_app", &["launch", "3", "1"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().filter(|l| l.starts_with("launch ")).count(), 3, "{out}");
    // a captured graph replays
    let (code, out, err) = s.run("driver_app", &["capture", "2", "1"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("captured") && out.contains("replayed"), "{out}");
    // a capture on the per-thread default stream, another thread launching meanwhile
    let (code, out, err) = s.run("ptsz_app", &["3", "1", "0"], &[("OTHER_THREAD", "1")]);
    assert_eq!(code, 0, "{out}{err}");
    for want in ["capturing 1", "info 1", "captured", "replayed"] {
        assert!(out.lines().any(|l| l == want), "{want:?} in {out}{err}");
    }
    // PyTorch's pattern: out-of-memory for what only its own memory stands in the way
    // of, then a free and a retry that succeeds
    let (code, out, err) = s.run("memory_app", &["retry", "3", "300", "200"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("oom 2 ") && out.contains("retried"), "{out}");
}

/// CUDA 13's pool look-ups by location (`cuMemGetDefaultMemPool`): an allocation from
/// the default pool of the program's device 1 is reserved on that device's GPU, though
/// its current context is on device 0 — as for the pools CUDA 12 looks up by device.
/// Before, the interposer did not see the look-up and reserved the allocation on the
/// current context's GPU.
#[test]
fn a_pool_looked_up_by_location_reserves_on_its_device() {
    let Some(s) = setup("pool") else { return };
    let preload = std::env::current_exe().unwrap().parent().unwrap().join("libtessera_cuda.so");
    let mut p = Command::new(s.dir.join("driver_app"))
        .args(["pool13", "300", "1000"])
        .env("LD_PRELOAD", preload)
        .env("LD_LIBRARY_PATH", &s.dir)
        .env("TESSERA_SOCKET", &s.socket)
        .env("TESSERA_GPUS", "2")
        .env("POOL_DEVICE", "1")
        .env("SHOW_DEVICES", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(p.stdout.take().unwrap()));
    for line in lines.by_ref() {
        let line = line.unwrap();
        out.push_str(&line);
        out.push('\n');
        if line == "allocated" {
            break;
        }
    }
    assert!(out.contains("allocated"), "{out}");
    let mut control = tessera_client::Client::connect_control(&s.socket).unwrap();
    let used: Vec<u64> = control.status().unwrap().gpus.iter().map(|g| g.memory_used).collect();
    for line in lines {
        out.push_str(&line.unwrap());
        out.push('\n');
    }
    assert!(p.wait().unwrap().success(), "{out}");
    // the program's device 1 is the node's GPU it says it sees as 1
    let device1 = if out.contains("sees 1 0000:11:00.0") { 1 } else { 0 };
    let mib = 1 << 20;
    assert!(used[device1] >= 300 * mib && used[1 - device1] < 300 * mib, "{used:?} {out}");
}
