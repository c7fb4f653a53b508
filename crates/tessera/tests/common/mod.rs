//! What the command's tests that run programs under the interposer share: NVIDIA's
//! header, the interposer built beside the `tessera` binary, a scratch directory with
//! the fake driver in it — or a SKIPPED line saying which is missing.
#![allow(dead_code)] // each test binary uses its own part of it
use std::path::{Path, PathBuf};

pub struct Scratch {
    /// NVIDIA's artefacts (`include/cuda.h`, ...).
    pub artifacts: PathBuf,
    /// A directory of the test's with `tessera` and `libtessera_cuda.so` (links to the
    /// build's).
    pub bin: PathBuf,
    /// A fresh directory of the test's own, removed when it ends.
    pub dir: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// NVIDIA's header, the interposer and a fresh scratch directory `tag`, or `None`
/// after a SKIPPED line.
pub fn scratch(tag: &str) -> Option<Scratch> {
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h")?;
    let built = Path::new(env!("CARGO_BIN_EXE_tessera")).parent().unwrap();
    if !built.join("libtessera_cuda.so").is_file()
        && !built.join("deps/libtessera_cuda.so").is_file()
    {
        eprintln!(
            "SKIPPED: {} has no libtessera_cuda.so (run the workspace's tests)",
            built.display()
        );
        return None;
    }
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // `bin`: tessera and the newest interposer side by side. The scripts under test
    // (try-without-gpu.sh, gpu-check.sh) look for the interposer beside `tessera`, as a
    // release build lays them out, and try-without-gpu.sh runs `cargo build --release`
    // when it is not there; a test build keeps it in deps/ until a later build copies it
    // up, and that copy may be an older build's (measured: a release build inside the
    // suite, +130 s, when no test had made the copy yet)
    let interposer = ["libtessera_cuda.so", "deps/libtessera_cuda.so"]
        .iter()
        .map(|p| built.join(p))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())?;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tessera"), bin.join("tessera")).unwrap();
    std::os::unix::fs::symlink(&interposer, bin.join("libtessera_cuda.so")).unwrap();
    Some(Scratch { artifacts, bin, dir })
}

impl Scratch {
    /// The fake driver built into the directory as `libcuda.so.1` (and `libcuda.so`).
    pub fn fake_driver(&self) {
        tessera_driver::testing::build_fake_driver(&self.artifacts, &self.dir.join("libcuda.so.1"))
            .unwrap();
        std::os::unix::fs::symlink("libcuda.so.1", self.dir.join("libcuda.so")).unwrap();
    }
}

/// `binary` on the PATH, or installed from Debian's `package` with apt-get (root
/// only); why not, if it cannot be. Says so on the test's output when it installs.
pub fn debian_tool(binary: &str, package: &str) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let there = || {
        Command::new("sh")
            .args(["-c", &format!("command -v {binary}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if there() {
        return Ok(());
    }
    if !rustix::process::geteuid().is_root() {
        return Err(format!("{binary} is not installed and installing {package} needs root"));
    }
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "installing {package} from Debian (apt-get)");
    for args in
        [&["update", "-qq"][..], &["install", "-y", "-qq", "--no-install-recommends", package][..]]
    {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("apt-get: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "apt-get {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    there().then_some(()).ok_or_else(|| format!("apt-get installed {package} but no {binary}"))
}

/// A `tessera demo-client` process replaying `tasks` batch tasks of 20 ms at
/// `weight`, 4 in flight, against the daemon at `socket` (its workload written in
/// `dir`).
pub fn demo_client(dir: &Path, socket: &Path, weight: u32, tasks: usize) -> std::process::Child {
    let workload = dir.join(format!("weight-{weight}.json"));
    let job = serde_json::json!({"kernels": [{"name": "k", "mean": 20_000_000u64}], "jobs": [{
        "arrival": 0, "tenant": {"id": 0, "class": {"class": "batch"}, "weight": weight, "priority": 0, "memory": 0},
        "kernel": 0, "tasks": vec![20_000_000u64; tasks], "window": 4, "submission": "window"}]});
    std::fs::write(&workload, job.to_string()).unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["demo-client", "--socket"])
        .arg(socket)
        .arg("--workload")
        .arg(&workload)
        .args(["--job", "0", "--speedup", "1", "--epoch-ms", "0"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The python of a virtual environment holding the Python CUDA client `name`
/// (`scripts/python-client.sh`: `numba-cuda`, `pynvml`, `cuda-bindings12` or `cuda-bindings13`), installed from PyPI the
/// first time; or why there is none.
pub fn python_client(name: &str) -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/python-client.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(name)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").to_string());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Wait up to 30 s for `child` (a daemon) to make `socket`; why not, with its stderr
/// when it exits first.
pub fn wait_for_socket(child: &mut std::process::Child, socket: &Path) -> Result<(), String> {
    let start = std::time::Instant::now();
    while !socket.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut log = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut err, &mut log);
            }
            return Err(format!("exited with {status}: {log}"));
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            return Err(format!("no {} after 30 s", socket.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// Stop `child` as systemd stops a service (SIGTERM: a daemon drains and removes its
/// files) and wait for it.
pub fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    child.wait().unwrap()
}

/// A child process killed (and reaped) when dropped, if it has not ended: a test that
/// panics must not leave a daemon behind holding its GPUs and sockets.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A daemon's configuration in `dir` for programs on the fake driver: `gpus` emulated
/// 1 GiB GPUs in real time, round-robin placement.
pub fn fake_node_config(dir: &Path, gpus: usize) -> tesserad::config::DaemonConfig {
    use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};
    DaemonConfig {
        socket: dir.join("d.sock"),
        ledger: dir.join("ledger"),
        gpus,
        gpu_memory_mib: 1024,
        executor: ExecutorKind::Emulated { speedup: 1.0 },
        policy: PolicyName::RoundRobin,
        ..DaemonConfig::default()
    }
}

/// The lock around installing tessera's package with `dpkg` (tests/package.rs and the
/// docs' `needs-root` blocks): one install at a time, and none while a test checks that
/// the machine has no package installed. Held until the file is dropped.
pub fn package_lock() -> std::fs::File {
    let f = std::fs::File::create(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dpkg.lock"))
        .unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).unwrap();
    f
}

/// The name the test harness gives `test` of the module whose `module_path!()` is
/// `module` (`file::test`: the tests are modules of one binary), for a test that runs
/// its own binary with `--exact` to start a helper process (a wrong name would run no
/// test at all, and exit 0).
pub fn harness_name(module: &str, test: &str) -> String {
    let file = module.split_once("::").map_or(module, |(_, m)| m);
    format!("{file}::{test}")
}
