//! The harness of the interposer's tests: a fake driver built against NVIDIA's
//! `cuda.h`, the test programs, a daemon, and the program run under `LD_PRELOAD`.
#![allow(dead_code)] // each test binary uses its own part of it
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

pub struct Setup {
    pub dir: PathBuf,
    pub app: PathBuf,
    pub preload: PathBuf,
    pub daemon: Option<Daemon>,
    pub socket: PathBuf,
    pub ledger: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fake driver installed as `libcuda.so.1` in a directory of its own (two devices,
/// of 1 and 2 GiB), the program built, and a daemon with `gpus` emulated 1 GiB GPUs.
pub fn setup(tag: &str, gpus: usize) -> Option<Setup> {
    setup_with(tag, gpus, 10.0)
}

/// As [`setup`], with the daemon's emulated time at `speedup` (1.0 when slices must
/// last their wall-clock length).
pub fn setup_with(tag: &str, gpus: usize, speedup: f64) -> Option<Setup> {
    setup_config(tag, |c| {
        c.gpus = gpus;
        c.executor = ExecutorKind::Emulated { speedup };
    })
}

/// As [`setup`], the daemon's configuration changed by `change` (2 GPUs at 10x unless
/// it says otherwise).
pub fn setup_config(tag: &str, change: impl FnOnce(&mut DaemonConfig)) -> Option<Setup> {
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h")?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("interposer-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    tessera_driver::testing::build_fake_driver(&artifacts, &dir.join("libcuda.so.1")).unwrap();
    let app = tessera_driver::testing::build_c_program(
        &artifacts,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/driver_app.c"),
        &dir.join("driver_app"),
    )
    .unwrap();
    let preload = std::env::current_exe().unwrap().parent().unwrap().join("libtessera_cuda.so");
    assert!(preload.is_file(), "{} not built", preload.display());
    let socket = dir.join("d.sock");
    let ledger = dir.join("ledger");
    let mut config = DaemonConfig {
        socket: socket.clone(),
        ledger: ledger.clone(),
        gpus: 2,
        gpu_memory_mib: 1024,
        executor: ExecutorKind::Emulated { speedup: 10.0 },
        policy: PolicyName::RoundRobin,
        ..DaemonConfig::default()
    };
    change(&mut config);
    let daemon = Daemon::start(&config).unwrap();
    // the daemon's paths as `change` left them
    let (socket, ledger) = (config.socket.clone(), config.ledger.clone());
    Some(Setup { dir, app, preload, daemon: Some(daemon), socket, ledger })
}

impl Setup {
    /// The program under the interposer, as a tenant with `env` settings.
    pub fn app(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        self.app_at(&self.app, args, env)
    }

    /// Another program, likewise.
    pub fn app_at(&self, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .env("LD_PRELOAD", &self.preload)
            .env("LD_LIBRARY_PATH", &self.dir)
            .env("TESSERA_SOCKET", &self.socket)
            .env("TESSERA_LEDGER", &self.ledger)
            .env("TESSERA_CUDA_LOG", self.dir.join("interposer.log"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("interposer.log")).unwrap_or_default()
    }
}

/// Read `child`'s stdout until a line starting with `want`; every line read, with when.
pub fn wait_for(child: &mut Child, want: &str) -> Vec<(Instant, String)> {
    let out = child.stdout.as_mut().unwrap();
    let mut lines = Vec::new();
    let mut reader = BufReader::new(out);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("no {want:?} line; read {lines:?}");
        }
        let line = line.trim().to_string();
        let done = line.starts_with(want);
        lines.push((Instant::now(), line));
        if done {
            return lines;
        }
    }
}

pub fn run(mut c: Command) -> (i32, String, String) {
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A child process killed when the test ends, however it ends (a failing test must not
/// leave a hung program behind).
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// The node's GPU a test program's device 0 is (the fake driver's GPU p has PCI bus id
/// 0000:(10+p):00.0), from its "device HANDLE BUS" line.
pub fn placed_gpu(out: &str) -> usize {
    out.lines()
        .find_map(|l| l.strip_prefix("device "))
        .and_then(|d| d.split_whitespace().nth(1))
        .and_then(|bus| bus.split(':').nth(1))
        .and_then(|b| usize::from_str_radix(b, 16).ok())
        .map(|b| b - 0x10)
        .unwrap_or_else(|| panic!("no device line in {out}"))
}

/// Wait for `child` at most `limit`; kill it and say so if it is still running.
pub fn finish_within(child: &mut Child, limit: std::time::Duration, what: &str) -> i32 {
    let end = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {limit:?}: it hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// What `child` wrote on stderr, to the end.
pub fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
    }
    s
}

/// Wait (at most 5 s) until the daemon counts `n` slices done; panic with its totals
/// if it does not.
pub fn slices_done(s: &Setup, n: u64) {
    let mut control = tessera_client::Client::connect_control(&s.socket).unwrap();
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    while control.status().unwrap().totals.batch_done < n {
        assert!(Instant::now() < deadline, "{:?}", control.status().unwrap().totals);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The kernels process `pid` ran, (start, end) in the timeline's nanoseconds, from the
/// fake driver's books under `prefix` (`FAKE_CUDA_TIMELINE`).
pub fn kernels_of(prefix: &Path, pid: u32) -> Vec<(u64, u64)> {
    let mut books = prefix.as_os_str().to_os_string();
    books.push(format!(".pid{pid}"));
    std::fs::read_to_string(books)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let v: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3).then(|| (v[1], v[2]))
        })
        .collect()
}
