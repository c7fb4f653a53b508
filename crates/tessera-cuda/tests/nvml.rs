//! NVML inside a tenant (issue 28): a program that reads NVML under the interposer sees
//! what its CUDA side shows it — its GPUs numbered as its CUDA ordinals, its memory
//! share, its own process, its own share of the GPU's time — while the same NVML read
//! by a program outside tessera shows the whole machine. Run on the fake driver and the
//! fake NVML, both compiled against NVIDIA's real headers (skipped, with the reason,
//! where those cannot be fetched).

use crate::common::*;
use std::path::PathBuf;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// The harness: a fair-queuing daemon on two emulated GPUs at real time, the fake NVML
/// installed as `libnvidia-ml.so.1` beside the fake driver, and `nvml_app` linked with
/// it.
fn nvml_setup(tag: &str) -> Option<(Setup, PathBuf)> {
    let s = setup_config(tag, |c| {
        c.policy = tesserad::config::PolicyName::Fair;
        c.executor = tesserad::config::ExecutorKind::Emulated { speedup: 1.0 };
    })?;
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip("nvml.h")?;
    let nvml =
        tessera_driver::testing::build_fake_nvml(&artifacts, &s.dir.join("libnvidia-ml.so.1"))
            .unwrap();
    let app = tessera_driver::testing::build_c_program_linked(
        &artifacts,
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvml_app.c"),
        &s.dir.join("nvml_app"),
        &[&nvml],
    )
    .unwrap();
    Some((s, app))
}

/// The rest of the line that is `prefix` or starts with `prefix `.
fn field<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find_map(|l| {
            let rest = l.trim_end().strip_prefix(prefix)?;
            if rest.is_empty() { Some(rest) } else { rest.strip_prefix(' ') }
        })
        .unwrap_or_else(|| panic!("no {prefix:?} line in\n{out}"))
}

fn numbers(text: &str) -> Vec<u64> {
    text.split([' ', ',']).filter_map(|x| x.parse().ok()).collect()
}

/// Under the interposer, beside a neighbour busy on the same GPU of a two-GPU machine:
/// one GPU (the program's device 0, the machine's GPU 0); its memory limit and the
/// 100 MiB it holds, the same figures as `cuMemGetInfo`, in `nvmlDeviceGetMemoryInfo`
/// v1 and v2; its own pid alone in every version of the running-process list (and in
/// the length asked for first); utilization 0 before it ran anything although the
/// neighbour kept the GPU busy, and its own share after it ran 600 ms of kernels; the
/// other GPU not found by UUID, PCI bus id or serial, nor by index. A program outside
/// tessera reading the same fake NVML meanwhile sees both GPUs, both processes and the
/// neighbour's work: the difference is the interposer's. Before, the tenant saw that
/// too (every GPU, every process, the whole memory).
#[test]
fn nvml_shows_a_tenant_its_gpu_memory_process_and_share() {
    let Some((s, app)) = nvml_setup("nvml") else { return };
    let prefix = s.dir.join("timeline");
    let on_gpu0 = [("CUDA_VISIBLE_DEVICES", "0")];
    let mut neighbour = s.app(&["launch", "200", "20"], &on_gpu0);
    neighbour.env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0");
    let mut neighbour = Reaped(neighbour.spawn().unwrap());
    wait_for(&mut neighbour, "launch");
    let mut tenant = s.app_at(
        &app,
        &["100", "600", "4000"],
        &[("CUDA_VISIBLE_DEVICES", "0"), ("TESSERA_MEMORY", "256MiB")],
    );
    tenant.env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0");
    let mut tenant = Reaped(tenant.spawn().unwrap());
    let lines = wait_for(&mut tenant, "done");
    let out: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    // meanwhile (the tenant holds its memory for 4 s), the machine as NVML shows it
    let outside = Command::new(&app)
        .args(["0", "0", "0"])
        .env("LD_LIBRARY_PATH", &s.dir)
        .env("FAKE_CUDA_TIMELINE", &prefix)
        .env("NVML_ONLY", "1")
        .output()
        .unwrap();
    let outside = String::from_utf8_lossy(&outside.stdout).into_owned();
    let neighbour_pid = u64::from(neighbour.id());
    drop(tenant);
    drop(neighbour);

    let pid: u64 = field(&out, "pid").parse().unwrap();
    for phase in ["before", "after"] {
        assert_eq!(field(&out, &format!("count {phase}")), "1", "{out}");
        assert_eq!(
            field(&out, &format!("device {phase} 0")),
            "GPU-fa000000-0000-0000-0000-000000000000",
            "{out}"
        );
    }
    let used = 100 * MIB;
    assert_eq!(numbers(field(&out, "memory before 0")), [256 * MIB, 0, 256 * MIB], "{out}");
    assert_eq!(numbers(field(&out, "memory after 0")), [256 * MIB, used, 156 * MIB], "{out}");
    assert_eq!(numbers(field(&out, "memory2 after 0")), [256 * MIB, used, 156 * MIB, 0], "{out}");
    assert_eq!(field(&out, "processes before 0 v1"), "", "{out}");
    assert_eq!(numbers(field(&out, "processes after 0 v1")), [pid], "{out}");
    for v in ["v2", "v3"] {
        // its pid, and the length the program was told to make room for: 1
        assert_eq!(numbers(field(&out, &format!("processes after 0 {v}"))), [pid, 1], "{out}");
    }
    let utilization = |phase: &str| numbers(field(&out, &format!("utilization {phase} 0")));
    assert_eq!(utilization("before"), [0, 0], "the neighbour's work is not the tenant's: {out}");
    let after = utilization("after");
    assert!((5..=100).contains(&after[0]) && after[1] <= after[0], "{out}");
    for kind in ["uuid", "pci", "serial"] {
        assert_eq!(field(&out, &format!("lookup {kind} 0")), "0 0", "{out}");
        assert_eq!(field(&out, &format!("lookup {kind} 1")), "6 -1", "NOT_FOUND: {out}");
    }
    assert_eq!(field(&out, "byindex 1"), "2", "INVALID_ARGUMENT: {out}");
    // the names pass through: NVML's own
    assert_eq!(field(&out, "name after 0"), "Fake GPU 0", "{out}");

    // outside tessera: the machine
    assert_eq!(field(&outside, "count before"), "2", "{outside}");
    let mut seen = numbers(field(&outside, "processes before 0 v1"));
    seen.sort_unstable();
    let mut both = vec![pid, neighbour_pid];
    both.sort_unstable();
    assert_eq!(seen, both, "{outside}");
    assert!(numbers(field(&outside, "memory before 0"))[1] >= 100 * MIB, "{outside}");
    assert!(utilization_of(&outside) > 0, "the neighbour's work shows outside: {outside}");
}

fn utilization_of(out: &str) -> u64 {
    numbers(field(out, "utilization before 0"))[0]
}

/// A monitoring tool (no CUDA at all) that reaches NVML by `dlopen` and `dlsym`, as
/// pynvml does, under the interposer with `CUDA_VISIBLE_DEVICES=1`: `nvmlInit` makes
/// it a tenant, placed on the machine's GPU 1, which it sees as its device 0 — found
/// by that GPU's UUID, PCI bus id and serial, with index 0 — and GPU 0 is found by none
/// of them. Its memory is its limit, and no process runs (it has no context). The fake
/// NVML's call log shows which calls reached it.
#[test]
fn a_monitoring_tool_sees_its_placed_gpu_as_device_0() {
    let Some((s, app)) = nvml_setup("nvml-dlopen") else { return };
    let mut c = s.app_at(
        &app,
        &["0", "0", "0"],
        &[
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("TESSERA_MEMORY", "128MiB"),
            ("NVML_DLOPEN", "1"),
            ("NVML_ONLY", "1"),
        ],
    );
    c.env("FAKE_CUDA_STATS", "0").env("FAKE_NVML_LOG", "1");
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(field(&out, "count before"), "1", "{out}");
    assert_eq!(field(&out, "device before 0"), "GPU-fa000000-0000-0000-0000-000000000001", "{out}");
    assert_eq!(numbers(field(&out, "memory before 0")), [128 * MIB, 0, 128 * MIB], "{out}");
    assert_eq!(field(&out, "processes before 0 v1"), "", "{out}");
    for kind in ["uuid", "pci", "serial"] {
        assert_eq!(field(&out, &format!("lookup {kind} 1")), "0 0", "{out}");
        assert_eq!(field(&out, &format!("lookup {kind} 0")), "6 -1", "{out}");
    }
    assert!(s.log().contains("dlsym nvmlDeviceGetCount_v2 -> hook"), "{}", s.log());
    // NVML's own books: the interposer found the placed GPU by its node index (1), the
    // program's index 0 never reached NVML, and an ungoverned call passed through
    let calls = std::fs::read_to_string(s.dir.join("libnvidia-ml.so.1.log")).unwrap();
    assert!(calls.lines().any(|l| l == "nvmlDeviceGetHandleByIndex_v2 1"), "{calls}");
    assert!(!calls.lines().any(|l| l == "nvmlDeviceGetHandleByIndex_v2 0"), "{calls}");
    assert!(calls.lines().any(|l| l == "nvmlDeviceGetName"), "{calls}");
}

/// Every route NVML has to a device handle, tried by a tenant placed on one GPU of two
/// (issue 51 item 9), beside a neighbour tenant on the same GPU: the topology look-ups
/// (the GPUs near CPU 0, the GPUs nearest its own), the S-class unit's GPUs, the MIG
/// devices (refused for a tenant, with one line), and the look-ups by UUID, PCI bus id
/// and serial find its own GPU only; a handle of the other GPU forged from its own (the
/// fake NVML's handles are 4 bytes apart) is refused by every entry point that takes
/// one (NVML_ERROR_INVALID_ARGUMENT, 2), even one NVML answers unchanged for its own
/// GPU (the name), or one relating two GPUs; the encoder sessions list its own process
/// only, and another pid's accounting is not found (6). The same program outside tessera
/// reaches the other GPU by each route and sees both processes: the difference is the
/// interposer's. Before, the topology, unit and MIG routes and every forged handle
/// passed through.
#[test]
fn no_route_reaches_a_gpu_the_tenant_is_not_placed_on() {
    let Some((s, app)) = nvml_setup("nvml-routes") else { return };
    let prefix = s.dir.join("timeline");
    let gpu0 = [("CUDA_VISIBLE_DEVICES", "0")];
    let mut neighbour = s.app(&["alloc", "10", "8000"], &gpu0);
    neighbour.env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0");
    let mut neighbour = Reaped(neighbour.spawn().unwrap());
    wait_for(&mut neighbour, "allocated");
    let knobs = [("FORGE_STRIDE", "4"), ("FAKE_NVML_MIG", "1")];
    let mut tenant = s.app_at(&app, &["16", "0", "3000"], &gpu0);
    tenant.envs(knobs).env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0");
    let mut tenant = Reaped(tenant.spawn().unwrap());
    let lines = wait_for(&mut tenant, "done");
    let out: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let outside = Command::new(&app)
        .args(["0", "0", "0"])
        .envs(knobs)
        .env("LD_LIBRARY_PATH", &s.dir)
        .env("FAKE_CUDA_TIMELINE", &prefix)
        .env("NVML_ONLY", "1")
        .output()
        .unwrap();
    let outside = String::from_utf8_lossy(&outside.stdout).into_owned();
    let (tenant_pid, neighbour_pid) = (u64::from(tenant.id()), u64::from(neighbour.id()));
    let _ = tenant.0.wait();
    let err = stderr_of(&mut tenant.0);
    drop(neighbour);

    let (mine, other) =
        ("GPU-fa000000-0000-0000-0000-000000000000", "GPU-fa000000-0000-0000-0000-000000000001");
    assert_eq!(field(&out, "count after"), "1", "{out}");
    assert_eq!(field(&out, "gpuset"), format!("0 1 {mine}"), "{out}");
    assert_eq!(field(&out, "nearest"), "0 0", "{out}");
    assert_eq!(field(&out, "unit"), format!("0 1 {mine}"), "{out}");
    assert_eq!(field(&out, "mig"), "3", "NVML_ERROR_NOT_SUPPORTED: {out}");
    assert_eq!(err.matches("nvmlDeviceGetMigDeviceHandleByIndex is refused").count(), 1, "{err}");
    assert!(!out.contains("frommig"), "{out}");
    for kind in ["uuid", "pci", "serial"] {
        assert_eq!(field(&out, &format!("lookup {kind} 1")), "6 -1", "{out}");
    }
    assert_eq!(field(&out, "forged 1"), "2 2 2 2 2", "{out}");
    assert_eq!(numbers(field(&out, "encoder")), [0, tenant_pid], "{out}");
    assert_eq!(field(&out, "accounting"), "6", "{out}");

    // outside tessera: every route reaches the other GPU
    assert_eq!(field(&outside, "gpuset"), format!("0 2 {mine},{other}"), "{outside}");
    assert_eq!(field(&outside, "nearest"), format!("0 1 {other}"), "{outside}");
    assert_eq!(field(&outside, "unit"), format!("0 2 {mine},{other}"), "{outside}");
    assert_eq!(field(&outside, "mig"), "0", "{outside}");
    assert_eq!(field(&outside, "frommig"), format!("0 1 {mine}"), "{outside}");
    assert_eq!(field(&outside, "forged 1"), "0 0 0 0 0", "{outside}");
    let mut sessions = numbers(field(&outside, "encoder"));
    sessions.sort_unstable();
    let mut both = vec![0, tenant_pid, neighbour_pid];
    both.sort_unstable();
    assert_eq!(sessions, both, "{outside}");
}

/// What `child` wrote on stderr.
fn stderr_of(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    if let Some(e) = child.stderr.as_mut() {
        let _ = std::io::Read::read_to_string(e, &mut err);
    }
    err
}
