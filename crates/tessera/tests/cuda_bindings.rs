//! NVIDIA's cuda-bindings (PyPI), the layer numba-cuda loads the driver through, used
//! alone under `tessera run` on the fake driver: the newest 12.9.x and the newest 13.x
//! run `tests/data/cuda_bindings_client.py`, which calls `cuda.bindings.driver`
//! directly. cuda-bindings asks the driver for every entry point with
//! `cuGetProcAddress` and the CUDA version each one's signature dates from (13.x asks
//! for some at 13000), so what it gets through the interposer is what those look-ups
//! answer. Installed by the test itself (`scripts/python-client.sh
//! cuda-bindings12|cuda-bindings13`); SKIPPED, with the reason, where PyPI or NVIDIA's
//! header cannot be reached or the interposer is not built.

use crate::common;

use std::path::Path;
use std::process::Command;
use tesserad::Daemon;

/// The client's output and the interposer's log, after running it with cuda-bindings
/// `major` as a tenant of 256 MiB (100 MiB kept, then 200 MiB asked beside it) on a
/// daemon with one of the fake driver's two 1 GiB GPUs; `None` after a SKIPPED line.
fn run_client(major: u32) -> Option<(Vec<String>, String)> {
    let scratch = common::scratch(&format!("cuda-bindings{major}"))?;
    let (bin, dir) = (&scratch.bin, &scratch.dir);
    let python = match common::python_client(&format!("cuda-bindings{major}")) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: cuda-bindings {major}.x could not be installed from PyPI: {why}");
            return None;
        }
    };
    // each on the driver it is made for: 12.9.x on the fake built against CUDA 12.9's
    // cuda.h, 13.x on the one built against 13.0's (a 580-series driver), whose
    // cuGetProcAddress has CUDA 13's variants to answer 13.x's look-ups at 13000 with
    let header = format!("{major}.{}", if major == 12 { 9 } else { 0 });
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip_for(&header, "cuda.h")?;
    tessera_driver::testing::build_fake_driver(&artifacts, &dir.join("libcuda.so.1")).unwrap();
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    let config = common::fake_node_config(dir, 1);
    let daemon = Daemon::start(&config).unwrap();
    let out = Command::new(bin.join("tessera"))
        .args(["run", "--socket"])
        .arg(&config.socket)
        .args(["--memory", "256MiB", "--"])
        .arg(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cuda_bindings_client.py"))
        .args(["100", "200"])
        .env("LD_LIBRARY_PATH", dir)
        .env("FAKE_CUDA_DEVICE_MIB", "1024")
        .env("TESSERA_CUDA_LOG", dir.join("interposer.log"))
        .output()
        .unwrap();
    daemon.shutdown();
    let log = std::fs::read_to_string(dir.join("interposer.log")).unwrap_or_default();
    let lines: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    assert!(
        out.status.success(),
        "cuda-bindings {major}.x: {}\n{lines:?}\n{}\n{log}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some((lines, log))
}

/// What both versions show: of the fake's two GPUs the client sees the one the daemon
/// placed it on; `cuMemGetInfo` shows its 256 MiB share as both free and total; 200 MiB
/// beside the 100 MiB it keeps is refused with `CUDA_ERROR_OUT_OF_MEMORY` (the fake's
/// GPU has 1 GiB: the refusal is the tenant's limit) and fits once the 100 MiB is
/// freed; a PTX module loads and `tessera_axpy` launches and computes y = 2x + 1. The
/// allocations and the launch went through the interposer's hooks: cuda-bindings found
/// them by `cuGetProcAddress`, which the interposer answers.
fn assert_governed(major: u32, lines: &[String], log: &str, also: &[&str]) {
    let version = format!("version {major}.");
    assert!(lines.iter().any(|l| l.starts_with(&version)), "{version:?} in {lines:?}");
    for want in [
        "devices 1",
        "meminfo 268435456 268435456",
        "allocated 100",
        "refused 200 CUDA_ERROR_OUT_OF_MEMORY",
        "retried 200 CUDA_SUCCESS",
        "loaded",
        "result OK",
    ]
    .iter()
    .chain(also)
    {
        assert!(lines.iter().any(|l| l == want), "{want:?} in {lines:?}\n{log}");
    }
    for hooked in ["cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuLaunchKernel"] {
        assert!(
            log.lines()
                .any(|l| l.starts_with("getproc ") && l.ends_with(&format!("-> hook {hooked}"))),
            "cuGetProcAddress answered cuda-bindings {major}.x with the hook {hooked}: {log}"
        );
    }
    assert!(
        log.lines().any(|l| l.starts_with(&format!("alloc {} ", 200u64 << 20)) && l.contains("-> refused")),
        "the interposer refused the 200 MiB: {log}"
    );
}

/// cuda-bindings 12.9.x (what numba-cuda 0.30 brings) as a tenant: see
/// [`assert_governed`].
#[test]
fn cuda_bindings_12_runs_as_a_tenant() {
    let Some((lines, log)) = run_client(12) else { return };
    assert_governed(12, &lines, &log, &[]);
}

/// cuda-bindings 13.x as a tenant, as 12.9.x does (see [`assert_governed`]); and its
/// CUDA 13 entry points, looked up at 13000, are CUDA 13's: `cuCtxGetDevice_v2` and
/// `cuCtxSynchronize_v2` of the primary context work with no context current (answered
/// with the CUDA 12 forms, which use the current context, they fail with
/// CUDA_ERROR_INVALID_CONTEXT).
#[test]
fn cuda_bindings_13_runs_as_a_tenant() {
    let Some((lines, log)) = run_client(13) else { return };
    assert_governed(13, &lines, &log, &["context13 device 0 synchronized"]);
}
