//! The README's command for trying tessera without a GPU
//! (`scripts/try-without-gpu.sh`): a real C program (`examples/cuda_axpy.c`) under
//! `tessera run` beside a daemon, on the fake driver, with the daemon's GPUs matching
//! the driver's; and NVIDIA's pynvml run by the same script, on its fake NVML. Skipped,
//! with the reason, where NVIDIA's header or pynvml cannot be fetched or the
//! interposer is not built.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn the_readmes_try_command_runs_a_c_program_under_tessera() {
    let Some(scratch) = common::scratch("try") else { return };
    let (bin, dir) = (&scratch.bin, &scratch.dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/try-without-gpu.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("TESSERA_BIN_DIR", bin)
        .env("TESSERA_TRY_DIR", dir)
        .env("FAKE_CUDA_DEVICES", "3")
        .env("FAKE_CUDA_DEVICE_MIB", "2048")
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("a daemon on 3 emulated GPUs of 2048 MiB"), "{stderr}");
    assert!(stderr.contains("FAKE driver (a stand-in that runs no real kernels)"), "{stderr}");
    // the program sees the one GPU it was placed on and its 1 GiB share, and computes
    assert!(stdout.contains("1 device(s) visible"), "{stdout}");
    assert!(stdout.contains("1024 MiB free of 1024 MiB"), "{stdout}");
    assert!(stdout.contains(": correct"), "{stdout}");
}

/// The rest of the line that starts with `prefix `.
fn field<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {prefix:?} line in\n{out}"))
}

fn numbers(text: &str) -> Vec<u64> {
    text.split([' ', ',']).filter_map(|x| x.parse().ok()).collect()
}

/// The script gives its programs NVML too (the README says a program sees only its GPU
/// through NVML as well): NVIDIA's pynvml (PyPI's nvidia-ml-py, which dlopens
/// `libnvidia-ml.so.1`) run by the script as the tenant (`tests/data/pynvml_client.py`,
/// which also allocates 100 MiB through CUDA) sees one GPU of the fake machine, its
/// 1 GiB limit with the 100 MiB used — v1 and v2 — and its own pid alone among the GPU's
/// processes (which the fake NVML reads from the fake driver's books). Before, the
/// script left NVML out and pynvml failed with "NVML Shared Library Not Found".
#[test]
fn the_try_script_shows_pynvml_the_tenants_share() {
    const MIB: u64 = 1 << 20;
    let Some(scratch) = common::scratch("try-pynvml") else { return };
    let python = match common::python_client("pynvml") {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: nvidia-ml-py could not be installed from PyPI: {why}");
            return;
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("../../scripts/try-without-gpu.sh"))
        .arg(&python)
        .arg(root.join("tests/data/pynvml_client.py"))
        .args(["tenant", "100"])
        .env("TESSERA_BIN_DIR", &scratch.bin)
        .env("TESSERA_TRY_DIR", &scratch.dir)
        .env("FAKE_CUDA_DEVICES", "3")
        .env("FAKE_CUDA_DEVICE_MIB", "2048")
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("libnvidia-ml.so.1 its FAKE NVML"), "{stderr}");
    let pid: u64 = field(&stdout, "pid").parse().unwrap();
    assert_eq!(field(&stdout, "count"), "1", "{stdout}");
    assert!(field(&stdout, "device 0").starts_with("GPU-fa000000-"), "{stdout}");
    for memory in ["memory 0", "memory2 0"] {
        assert_eq!(
            numbers(field(&stdout, memory)),
            [1024 * MIB, 100 * MIB, 924 * MIB],
            "the tenant's 1 GiB, not the GPU's 2 GiB: {stdout}"
        );
    }
    assert_eq!(numbers(field(&stdout, "processes 0")), [pid], "{stdout}");
}

/// The example's PTX is real: NVIDIA's `ptxas` assembles it for sm_70.
#[test]
fn the_examples_ptx_assembles_with_nvidias_ptxas() {
    let Some(artifacts) = tessera_driver::testing::nvidia_artifacts_or_skip("ptxas") else {
        return;
    };
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("axpy-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cuda_axpy.c");
    let ptx = ptx_of(&std::fs::read_to_string(example).unwrap());
    assert!(ptx.starts_with(".version") && ptx.contains(".entry tessera_axpy"), "{ptx}");
    std::fs::write(dir.join("axpy.ptx"), &ptx).unwrap();
    let assembled = Command::new(artifacts.join("bin/ptxas"))
        .args(["-arch=sm_70", "-o"])
        .arg(dir.join("axpy.cubin"))
        .arg(dir.join("axpy.ptx"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(assembled.status.success(), "{}", String::from_utf8_lossy(&assembled.stderr));
}

/// The `axpy_ptx` string of the example's C source: its literals up to the statement's
/// end joined, escapes read (`\n` is the only one it uses).
fn ptx_of(source: &str) -> String {
    let start = source.find("axpy_ptx[] =").expect("the example defines axpy_ptx");
    let mut ptx = String::new();
    let mut literal = false;
    let mut chars = source[start..].chars();
    while let Some(c) = chars.next() {
        match (literal, c) {
            (false, '"') | (true, '"') => literal = !literal,
            (true, '\\') => match chars.next() {
                Some('n') => ptx.push('\n'),
                Some(other) => ptx.push(other),
                None => {}
            },
            (true, c) => ptx.push(c),
            (false, ';') => break,
            (false, _) => {}
        }
    }
    ptx
}
