//! A real third-party CUDA client under tessera: numba-cuda (PyPI; NVIDIA's CUDA
//! target for numba, whose driver calls go through NVIDIA's cuda-bindings, which load
//! `libcuda.so.1` themselves) runs `tests/data/numba_client.py` under `tessera run`, on
//! the fake driver, beside a daemon and another tenant. Installed by the test itself
//! (`scripts/python-client.sh numba-cuda`); SKIPPED, with the reason, where PyPI or NVIDIA's
//! header cannot be reached or the interposer is not built.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::{Client, TaskRequest, TenantOptions};
use tesserad::Daemon;

/// The scratch directory `tag` with the fake driver, numba-cuda's Python (installed by
/// the test), and a daemon on one GPU of the fake node; `None` (said SKIPPED) where
/// they cannot be had.
fn numba_node(
    tag: &str,
) -> Option<(common::Scratch, std::path::PathBuf, tesserad::config::DaemonConfig, Daemon)> {
    let scratch = common::scratch(tag)?;
    let python = match common::python_client("numba-cuda") {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: numba-cuda could not be installed from PyPI: {why}");
            return None;
        }
    };
    scratch.fake_driver();
    let config = common::fake_node_config(&scratch.dir, 1);
    let daemon = Daemon::start(&config).unwrap();
    Some((scratch, python, config, daemon))
}

/// numba-cuda as a tenant: of the fake driver's two GPUs it sees the one the daemon
/// has; `cuMemGetInfo` (numba's `get_memory_info`) shows its 256 MiB share; 300 MiB
/// more is refused with numba's own out-of-memory error (CudaAPIError, code 2) while
/// 100 MiB fits; its kernel — a CUDA 12 `CUkernel` from `cuLibraryGetKernel`, which
/// numba launches as a function — compiles and launches, its resources asked with
/// `cuKernelGetAttribute` (the fake, like the driver, refuses a kernel handle to
/// `cuFuncGetAttribute`); and its launch waits behind another tenant's running task.
/// Before, numba stopped on entry points the fake lacked (`cuCtxGetCurrent`,
/// `cuLibraryLoadData`, ...).
#[test]
fn numba_cuda_runs_as_a_tenant() {
    let Some((scratch, python, config, daemon)) = numba_node("numba") else { return };
    let (bin, dir) = (&scratch.bin, &scratch.dir);
    let mut numba = Command::new(bin.join("tessera"))
        .args(["run", "--socket"])
        .arg(&config.socket)
        .args(["--memory", "256MiB", "--"])
        .arg(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/numba_client.py"))
        .args(["100", "300"])
        .env("LD_LIBRARY_PATH", dir)
        .env("FAKE_CUDA_DEVICE_MIB", "1024")
        .env("TESSERA_CUDA_LOG", dir.join("interposer.log"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = numba.stdin.take().unwrap();
    let stderr = dir.join("stderr");
    let mut lines = BufReader::new(numba.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut read_until = |want: &str, seen: &mut Vec<String>| {
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push(line.clone());
            if line.starts_with(want) {
                return;
            }
        }
        let err = std::fs::read_to_string(&stderr).unwrap_or_default();
        panic!("no {want:?} line: {seen:?}\n{err}");
    };
    read_until("compiled", &mut seen);
    for want in
        ["devices 1", "meminfo 268435456 268435456", "allocated 100", "refused 300 out_of_memory"]
    {
        assert!(seen.iter().any(|l| l == want), "{want:?} in {seen:?}");
    }
    // another tenant's 1.5 s task takes the GPU; numba's next launch waits for it
    let mut other = Client::connect(&config.socket).unwrap();
    let tenant = other.register(TenantOptions::batch()).unwrap();
    let task = TaskRequest {
        kernel: 0,
        cost: Duration::from_millis(1500),
        memory: 0,
        input: vec![],
        output_len: 0,
    };
    other.submit(tenant, &task).unwrap();
    let mut control = Client::connect_control(&config.socket).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // (numba's own slice, from its first launch, ends before the task can run)
    while !control.status().unwrap().gpus[0].running.iter().any(|r| r.tenant == Some(tenant)) {
        assert!(Instant::now() < deadline, "the other tenant's task never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    let go = Instant::now();
    writeln!(stdin).unwrap();
    read_until("launched", &mut seen);
    let waited = go.elapsed();
    read_until("result OK", &mut seen);
    let done = other.wait_any(Duration::from_secs(10)).unwrap();
    assert_eq!(done.outcome, tessera_client::Outcome::Done);
    let status = numba.wait().unwrap();
    let log = std::fs::read_to_string(dir.join("interposer.log")).unwrap_or_default();
    daemon.shutdown();
    assert!(status.success(), "{seen:?}");
    assert!(waited >= Duration::from_millis(1000), "the launch waited only {waited:?}");
    assert!(
        log.lines().any(|l| l.starts_with("kernel ") && l.contains(": 32 registers")),
        "the CUkernel's resources: {log}"
    );
}

/// numba-cuda under `tessera run` with kernel slicing `on` or off (threshold 4 blocks,
/// 5 per sub-kernel) launching its kernel over `blocks`: the fake driver's log (numba's
/// calls as the driver saw them) and the interposer's.
fn numba_sliced(tag: &str, on: bool, blocks: u32) -> Option<(String, String)> {
    let (scratch, python, config, daemon) = numba_node(tag)?;
    let (bin, dir) = (&scratch.bin, &scratch.dir);
    let out = Command::new(bin.join("tessera"))
        .args(["run", "--socket"])
        .arg(&config.socket)
        .arg("--")
        .arg(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/numba_sliced.py"))
        .arg(blocks.to_string())
        .env("LD_LIBRARY_PATH", dir)
        .env("TESSERA_KERNEL_SLICING", if on { "1" } else { "0" })
        .env("TESSERA_KERNEL_SLICE_MIN_BLOCKS", "4")
        .env("TESSERA_KERNEL_SLICE_BLOCKS", "5")
        .env("FAKE_CUDA_LOG", "1")
        .env("TESSERA_CUDA_LOG", dir.join("interposer.log"))
        .output()
        .unwrap();
    daemon.shutdown();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // the fake's log is named after the path it was loaded by (cuda-bindings opens
    // `libcuda.so`)
    let log: String = ["libcuda.so.log", "libcuda.so.1.log"]
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
        .collect();
    let interposer = std::fs::read_to_string(dir.join("interposer.log")).unwrap_or_default();
    assert!(
        out.status.success() && stdout.contains(&format!("launched {blocks}")),
        "{}: {stdout}{stderr}\n-- the driver's log:\n{log}\n-- the interposer's:\n{interposer}",
        out.status
    );
    Some((log, interposer))
}

/// The grids of the launches in the fake driver's log.
fn grids(log: &str) -> Vec<u32> {
    log.lines()
        .filter(|l| l.starts_with("cuLaunchKernel "))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// Kernel slicing and a real client (issue 58): numba-cuda 0.30.4 compiles its kernel to
/// LTO-IR, links it with nvJitLink itself (found through `dlsym`, as cuda-bindings
/// does) and hands the driver a cubin (`cuLibraryLoadData`), which has no PTX. With
/// slicing on, the interposer's nvJitLink hooks link the same LTO-IR again with `-ptx`
/// (the real nvJitLink, from PyPI, runs here without a GPU), recognise the cubin when
/// numba loads it and load that PTX with its kernel's twin instead: numba's launch of 12
/// blocks is issued as sub-kernels of 5, 5 and 2. Before, the cubin was loaded as given
/// and the launch ran whole. The fake driver runs no numba kernel, so what is checked is
/// what was loaded and launched, from its log.
#[test]
fn numba_cuda_kernels_are_sliced_through_nvjitlinks_ptx() {
    let Some((log, interposer)) = numba_sliced("numba-sliced", true, 12) else { return };
    assert!(
        interposer.contains("kernel slicing: nvJitLink's link of 1 input(s) taken as PTX too"),
        "the link's PTX: {interposer}"
    );
    assert!(
        interposer.contains("kernel slicing: a cubin nvJitLink linked: its link's PTX, with twins"),
        "{interposer}"
    );
    assert!(!interposer.contains("loaded as given"), "{interposer}");
    // the library the driver was given is PTX text with the twin, not the cubin
    let loads: Vec<&str> = log.lines().filter(|l| l.starts_with("cuLibraryLoadData")).collect();
    assert_eq!(loads.len(), 1, "{log}");
    assert!(
        log.lines().any(|l| l.starts_with("cuLibraryGetKernel ") && l.contains("__tessera_slice")),
        "the twin taken from the library: {log}"
    );
    assert_eq!(grids(&log), [5, 5, 2], "numba's launch, as sub-kernels: {log}");
}

/// The same with slicing off: nvJitLink is not hooked, numba's cubin is loaded as it
/// is, and its launch of 12 blocks runs whole.
#[test]
fn numba_cuda_kernels_run_whole_without_slicing() {
    let Some((log, interposer)) = numba_sliced("numba-whole", false, 12) else { return };
    // (the interposer did answer numba's look-ups: its log is not just empty)
    assert!(interposer.contains("dlsym cuGetProcAddress_v2 -> hook"), "{interposer}");
    assert!(!interposer.contains("nvJitLink"), "{interposer}");
    assert!(log.contains("cuLibraryLoadData"), "numba did not load a library: {log}");
    assert!(!log.contains("__tessera_slice"), "a twin without slicing: {log}");
    assert_eq!(grids(&log), [12], "numba's launch, whole: {log}");
}
