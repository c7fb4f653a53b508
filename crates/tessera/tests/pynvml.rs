//! A real NVML client under tessera (issue 28): NVIDIA's pynvml (PyPI's nvidia-ml-py,
//! which `dlopen`s `libnvidia-ml.so.1` and reaches every function by `dlsym`) runs
//! `tests/data/pynvml_client.py` under `tessera run` beside another tenant on the same
//! GPU, on the fake driver and the fake NVML (both compiled against NVIDIA's real
//! headers). Installed by the test itself (`scripts/python-client.sh pynvml`); SKIPPED,
//! with the reason, where PyPI or NVIDIA's headers cannot be reached or the interposer
//! is not built.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use tesserad::Daemon;

const MIB: u64 = 1 << 20;

/// A child killed when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of `out` up to the one that starts with `until`.
fn read_until(out: &mut BufReader<ChildStdout>, until: &str, stderr: &Path) -> String {
    let mut text = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let err = std::fs::read_to_string(stderr).unwrap_or_default();
            panic!("no {until:?} line in\n{text}\nstderr:\n{err}");
        }
        text.push_str(&line);
        if line.starts_with(until) {
            return text;
        }
    }
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

/// pynvml as a tenant with a 256 MiB limit, placed on the machine's GPU 0 beside a
/// neighbour tenant that holds 200 MiB there: NVML shows it one GPU (the machine's
/// GPU 0), its 256 MiB limit and the 100 MiB it allocated — v1 and v2 — and its own pid
/// alone among the GPU's processes; the machine's GPU 1 is not found by UUID
/// (NVML_ERROR_NOT_FOUND, 6). pynvml outside tessera meanwhile sees two GPUs and both
/// processes. Before, the tenant saw that too.
#[test]
fn pynvml_sees_only_the_tenants_share() {
    let Some(scratch) = common::scratch("pynvml") else { return };
    let (bin, dir) = (&scratch.bin, &scratch.dir);
    let python = match common::python_client("pynvml") {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: nvidia-ml-py could not be installed from PyPI: {why}");
            return;
        }
    };
    let Some(artifacts) = tessera_driver::testing::nvidia_artifacts_or_skip("nvml.h") else {
        return;
    };
    scratch.fake_driver();
    tessera_driver::testing::build_fake_nvml(&artifacts, &dir.join("libnvidia-ml.so.1")).unwrap();
    let config = common::fake_node_config(dir, 2);
    let daemon = Daemon::start(&config).unwrap();
    let script: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pynvml_client.py");
    let timeline = dir.join("timeline");
    let python_with = |args: &[&str]| {
        let mut c = Command::new(&python);
        c.arg(&script)
            .args(args)
            .env("LD_LIBRARY_PATH", dir)
            .env("FAKE_CUDA_TIMELINE", &timeline)
            .env("FAKE_CUDA_STATS", "0")
            .env("CUDA_VISIBLE_DEVICES", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        c
    };
    let under_tessera = |memory: &str, args: &[&str], stderr: &Path| {
        let mut c = Command::new(bin.join("tessera"));
        c.args(["run", "--socket"])
            .arg(&config.socket)
            .args(["--memory", memory, "--"])
            .arg(&python)
            .arg(&script)
            .args(args)
            .env("LD_LIBRARY_PATH", dir)
            .env("FAKE_CUDA_TIMELINE", &timeline)
            .env("FAKE_CUDA_STATS", "0")
            .env("CUDA_VISIBLE_DEVICES", "0")
            .env("TESSERA_CUDA_LOG", dir.join("interposer.log"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr).unwrap());
        Reaped(c.spawn().unwrap())
    };
    let neighbour_err = dir.join("neighbour.stderr");
    let mut neighbour = under_tessera("512MiB", &["neighbour", "200"], &neighbour_err);
    let mut neighbour_out = BufReader::new(neighbour.0.stdout.take().unwrap());
    let said = read_until(&mut neighbour_out, "allocated", &neighbour_err);
    let neighbour_pid: u64 = field(&said, "pid").parse().unwrap();

    let tenant_err = dir.join("tenant.stderr");
    let mut tenant = under_tessera("256MiB", &["tenant", "100"], &tenant_err);
    let mut tenant_out = BufReader::new(tenant.0.stdout.take().unwrap());
    let out = read_until(&mut tenant_out, "done", &tenant_err);
    // while both hold their memory: pynvml outside tessera
    let outside = python_with(&["outside"]).stdin(Stdio::null()).output().unwrap();
    let outside = String::from_utf8_lossy(&outside.stdout).into_owned();
    drop(tenant);
    drop(neighbour);
    daemon.shutdown();

    let pid: u64 = field(&out, "pid").parse().unwrap();
    assert_eq!(field(&out, "count"), "1", "{out}");
    assert_eq!(field(&out, "device 0"), "GPU-fa000000-0000-0000-0000-000000000000", "{out}");
    assert_eq!(numbers(field(&out, "memory 0")), [256 * MIB, 100 * MIB, 156 * MIB], "{out}");
    assert_eq!(numbers(field(&out, "memory2 0")), [256 * MIB, 100 * MIB, 156 * MIB], "{out}");
    assert_eq!(numbers(field(&out, "processes 0")), [pid], "{out}");
    assert_eq!(field(&out, "uuid 0"), "found", "{out}");
    assert_eq!(field(&out, "uuid 1"), "error 6", "{out}");

    assert_eq!(field(&outside, "count"), "2", "{outside}");
    let mut seen = numbers(field(&outside, "processes 0"));
    seen.sort_unstable();
    let mut both = vec![pid, neighbour_pid];
    both.sort_unstable();
    assert_eq!(seen, both, "{outside}");
    assert_eq!(numbers(field(&outside, "memory 0"))[1], 300 * MIB, "{outside}");
}
