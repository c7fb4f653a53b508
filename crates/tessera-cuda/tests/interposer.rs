//! Unmodified CUDA programs (`driver_app.c`, the driver API reached through `dlopen` +
//! `dlsym` and `cuGetProcAddress`, as the CUDA runtime reaches it) under
//! `LD_PRELOAD=libtessera_cuda.so`, beside a tesserad, on the fake driver compiled
//! against NVIDIA's `cuda.h`. Skipped, with the reason, where that header cannot be
//! fetched.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tesserad::config::{ExecutorKind, PolicyName};

/// Two tenants whose memory does not fit on the GPU together: the second allocation
/// waits in the ledger and completes once the first tenant frees, instead of failing.
#[test]
fn a_tenant_waits_for_memory_a_neighbour_frees() {
    let Some(s) = setup("wait", 1) else { return };
    let mut a = s.app(&["alloc", "700", "800"], &[]).spawn().unwrap();
    wait_for(&mut a, "allocated");
    let started = Instant::now();
    let mut b = s.app(&["alloc", "700", "0"], &[]).spawn().unwrap();
    let b_lines = wait_for(&mut b, "allocated");
    let a_lines = wait_for(&mut a, "freed");
    let (a_freed, b_allocated) = (a_lines.last().unwrap().0, b_lines.last().unwrap().0);
    assert!(b_allocated >= a_freed - Duration::from_millis(50), "b allocated before a freed");
    assert!(started.elapsed() >= Duration::from_millis(500), "b waited for a's hold");
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
}

/// A tenant over its limit gets CUDA_ERROR_OUT_OF_MEMORY (2), and `cuMemGetInfo`
/// shows a tenant its own share: its limit as the total, less what it holds as free.
#[test]
fn the_limit_is_enforced_and_reported() {
    let Some(s) = setup("limit", 2) else { return };
    let (code, out, _) = run(s.app(&["alloc", "300", "0"], &[("TESSERA_MEMORY", "256MiB")]));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("error alloc 2"), "{out}");
    let (code, out, err) = run(s.app(&["meminfo", "100"], &[("TESSERA_MEMORY", "512MiB")]));
    assert_eq!(code, 0, "{out}{err}");
    let infos: Vec<&str> = out.lines().filter(|l| l.starts_with("meminfo")).collect();
    assert_eq!(infos, vec!["meminfo 536870912 536870912", "meminfo 432013312 536870912"], "{out}");
}

/// The allocation reached through `cuGetProcAddress("cuMemAlloc", 12000, ...)` is the
/// interposer's hook for `cuMemAlloc_v2`, so it is governed too.
#[test]
fn entry_points_from_cu_get_proc_address_are_governed() {
    let Some(s) = setup("getproc", 2) else { return };
    let (code, out, _) = run(s.app(&["getproc", "300"], &[("TESSERA_MEMORY", "256MiB")]));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("error alloc 2"), "{out}");
    let log = s.log();
    assert!(log.contains("getproc cuMemAlloc 12000 0 -> hook cuMemAlloc_v2"), "{log}");
    assert!(log.contains("dlsym cuMemAlloc_v2 -> hook"), "{log}");
}

/// A tenant killed with SIGKILL while it holds memory frees its share: the ledger sees
/// its record's lock go, and a waiting neighbour gets the memory.
#[test]
fn a_killed_tenant_frees_its_share() {
    let Some(s) = setup("kill", 1) else { return };
    let mut a = s.app(&["alloc", "700", "60000"], &[]).spawn().unwrap();
    wait_for(&mut a, "allocated");
    let mut b = s.app(&["alloc", "700", "0"], &[]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    a.kill().unwrap();
    let _ = a.wait();
    wait_for(&mut b, "freed");
    assert!(b.wait().unwrap().success());
}

/// Without a daemon, `cuInit` fails with CUDA_ERROR_SYSTEM_NOT_READY (802) and one
/// line on stderr — or runs unmanaged with a warning when the settings say so; a bad
/// setting gets CUDA_ERROR_INVALID_VALUE (1) and a line naming it.
#[test]
fn no_daemon_and_bad_settings_get_a_cuda_error_and_one_line() {
    let Some(s) = setup("nodaemon", 2) else { return };
    let gone = s.dir.join("nobody.sock");
    let gone = gone.to_str().unwrap();
    let (code, out, err) = run(s.app(&["alloc", "1", "0"], &[("TESSERA_SOCKET", gone)]));
    assert_eq!((code, out.trim()), (2, "error init 802"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no tesserad") && err.contains("TESSERA_ON_NO_DAEMON"), "{err}");
    let (code, out, err) = run(s.app(
        &["alloc", "1", "0"],
        &[("TESSERA_SOCKET", gone), ("TESSERA_ON_NO_DAEMON", "passthrough")],
    ));
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("running unmanaged"), "{err}");
    let (code, out, err) = run(s.app(&["alloc", "1", "0"], &[("TESSERA_MEMORY", "lots")]));
    assert_eq!((code, out.trim()), (2, "error init 1"), "{err}");
    assert!(err.contains("TESSERA_MEMORY"), "{err}");
}

/// The program sees only the GPU the daemon placed it on: the first tenant on GPU 0,
/// the second, while the first holds it, on GPU 1 — each seeing one device, its
/// device 0, which is the GPU it was placed on.
#[test]
fn a_program_sees_only_the_gpus_it_was_placed_on() {
    let Some(s) = setup("placement", 2) else { return };
    let mut a = s.app(&["alloc", "1", "400"], &[]).spawn().unwrap();
    let a_lines = wait_for(&mut a, "allocated");
    let (code, out, err) = run(s.app(&["alloc", "1", "0"], &[]));
    assert_eq!(code, 0, "{out}{err}");
    let seen = |lines: Vec<String>| -> (String, String) {
        let find = |p: &str| lines.iter().find(|l| l.starts_with(p)).cloned().unwrap_or_default();
        (find("devices"), find("device "))
    };
    let a_seen = seen(a_lines.into_iter().map(|(_, l)| l).collect());
    let b_seen = seen(out.lines().map(String::from).collect());
    // numbered from 0 as under CUDA_VISIBLE_DEVICES, each the GPU it was placed on
    assert_eq!(a_seen, ("devices 1".into(), "device 0 0000:10:00.0".into()));
    assert_eq!(b_seen, ("devices 1".into(), "device 0 0000:11:00.0".into()));
    assert!(a.wait().unwrap().success());
}

/// Launch times ("launch T" lines) of a finished run.
fn launches(out: &str) -> Vec<u64> {
    out.lines().filter_map(|l| l.strip_prefix("launch ")).filter_map(|t| t.parse().ok()).collect()
}

/// How often the launching program changes, over the two programs' launches in time
/// order.
fn switches(a: &[u64], b: &[u64]) -> usize {
    let mut all: Vec<(u64, u8)> =
        a.iter().map(|t| (*t, 0)).chain(b.iter().map(|t| (*t, 1))).collect();
    all.sort_unstable();
    all.windows(2).filter(|w| w[0].1 != w[1].1).count()
}

/// Two tenants' kernel launches go through the launch gate in the slices the daemon's
/// policy grants (one GPU, one slice at a time): each program launches in long runs,
/// switching a few times, where without the interposer the same two programs
/// interleave their launches all along.
#[test]
fn two_tenants_launch_in_alternating_slices() {
    let Some(s) = setup_with("gate", 1, 1.0) else { return };
    let both = |preload: bool| {
        let spawn = || {
            let mut c = s.app(&["launch", "20", "5"], &[("TESSERA_SLICE_MS", "100")]);
            if !preload {
                c.env_remove("LD_PRELOAD");
            }
            c.spawn().unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        for o in [&a, &b] {
            assert!(
                o.status.success(),
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let (la, lb) = (
            launches(&String::from_utf8_lossy(&a.stdout)),
            launches(&String::from_utf8_lossy(&b.stdout)),
        );
        assert_eq!((la.len(), lb.len()), (20, 20));
        switches(&la, &lb)
    };
    let free = both(false);
    let gated = both(true);
    eprintln!("launch hand-overs: {free} ungated, {gated} gated");
    // 200 ms of work in 100 ms slices: a handful of hand-overs; ungated, the two
    // 5 ms-per-launch programs alternate about every launch
    assert!(gated <= 6, "{gated} switches under the gate");
    assert!(free >= 3 * gated.max(2), "{free} switches ungated, {gated} gated");
}

/// NVIDIA's real CUDA runtime as a client: every governed entry point it looks up (all
/// but the virtual-memory calls, which the runtime does not use)
/// through `cuGetProcAddress` (with versions, and again with the per-thread-stream
/// flag) is answered with the interposer's hook of the variant the driver has, and the
/// program then ends with the runtime's own error — on a fake driver the runtime cannot
/// get its private tables — never a crash.
#[test]
fn the_real_cuda_runtime_gets_the_hooks_and_fails_cleanly() {
    let Some(s) = setup("runtime", 1) else { return };
    let artifacts = tessera_driver::testing::nvidia_artifacts().unwrap();
    let exe = s.dir.join("runtime_app");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .arg("-I")
        .arg(artifacts.join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/runtime_app.c"))
        .arg(artifacts.join("lib/libcudart.so.12"))
        .arg(format!("-Wl,-rpath,{}", artifacts.join("lib").display()))
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let out = s.app_at(&exe, &[], &[]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "the program's own error path: {stdout}");
    assert!(stdout.starts_with("cudaMalloc ") && !stdout.starts_with("cudaMalloc 0 "), "{stdout}");
    let log = s.log();
    let governed = [
        "cuInit",
        "cuDeviceGet",
        "cuDeviceGetCount",
        "cuMemAlloc",
        "cuMemAllocManaged",
        "cuMemAllocPitch",
        "cuMemFree",
        "cuMemGetInfo",
        "cuMemAllocAsync",
        "cuMemAllocFromPoolAsync",
        "cuMemFreeAsync",
        "cuArrayCreate",
        "cuArray3DCreate",
        "cuArrayDestroy",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuGraphLaunch",
    ];
    let mut answered = std::collections::BTreeSet::new();
    for line in log.lines().filter_map(|l| l.strip_prefix("getproc ")) {
        let name = line.split_whitespace().next().unwrap_or_default();
        if governed.contains(&name) {
            assert!(line.contains("-> hook"), "a governed entry point answered unhooked: {line}");
            answered.insert(name.to_string());
        }
    }
    let want: std::collections::BTreeSet<String> = governed.iter().map(|n| n.to_string()).collect();
    assert_eq!(answered, want, "the runtime looked up every governed entry point:\n{log}");
    assert!(log.contains("getproc cuMemAlloc 3020 0 -> hook cuMemAlloc_v2"), "{log}");
    assert!(log.contains("getproc cuLaunchKernel 7000 2 -> hook cuLaunchKernel_ptsz"), "{log}");
}

/// The daemon going away while a program launches kernels: the next launch that needs
/// a slice fails with CUDA_ERROR_SYSTEM_NOT_READY (802) and one line on stderr; the
/// program ends on its own error path.
#[test]
fn a_daemon_that_goes_away_fails_launches_with_one_line() {
    let Some(mut s) = setup_with("gone", 1, 1.0) else { return };
    let mut app = s.app(&["launch", "100000", "1"], &[("TESSERA_SLICE_MS", "5")]).spawn().unwrap();
    for _ in 0..5 {
        wait_for(&mut app, "launch");
    }
    s.daemon.take().unwrap().shutdown();
    let out = app.wait_with_output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.trim_end().ends_with("error launch 802"), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("tesserad went away"), "{stderr}");
}

/// Stream-ordered allocations, virtual-memory handles and arrays go through the ledger
/// too: within the tenant's limit they are made and returned (twice in a row in one
/// process, which fits the limit only if the first was returned), beyond it they fail
/// with CUDA_ERROR_OUT_OF_MEMORY.
#[test]
fn every_allocation_entry_point_is_governed() {
    let Some(s) = setup("kinds", 1) else { return };
    let limit = [("TESSERA_MEMORY", "256MiB")];
    for mode in ["alloc", "async", "vmm", "array"] {
        let (code, out, err) = run(s.app(&[mode, "200", "0"], &[limit[0], ("ROUNDS", "2")]));
        assert_eq!(code, 0, "{mode}: {out}{err}");
        assert_eq!(out.matches("freed").count(), 2, "{mode}: {out}");
        let (code, out, _) = run(s.app(&[mode, "300", "0"], &limit));
        assert_eq!(code, 2, "{mode}: {out}");
        assert!(out.contains("error alloc 2"), "{mode}: {out}");
    }
    let log = s.log();
    for what in [
        "dlsym cuMemAllocAsync -> hook",
        "dlsym cuMemCreate -> hook",
        "dlsym cuArrayCreate_v2 -> hook",
    ] {
        assert!(log.contains(what), "{what}:\n{log}");
    }
}

/// Each slice request carries the tenant's latest launch — grid, block, and the
/// kernel's registers (asked of the driver once per function) — and the daemon turns
/// it into the kernel's demand by the occupancy arithmetic, shown in `status`.
#[test]
fn launch_shapes_reach_the_daemon_as_demand() {
    use tessera_gpu::occupancy::{Launch, SmLimits, occupancy};
    let Some(s) = setup_with("shape", 1, 1.0) else { return };
    // 320 blocks of 256 threads, 32 registers (what the fake driver reports): half of a
    // V100's block slots
    let mut app = s
        .app(&["launch", "3000", "1", "320", "256"], &[("TESSERA_SLICE_MS", "5")])
        .spawn()
        .unwrap();
    wait_for(&mut app, "launch");
    let want = occupancy(
        &Launch {
            grid_blocks: 320,
            threads_per_block: 256,
            registers_per_thread: 32,
            shared_per_block: 0,
        },
        &SmLimits::V100,
    )
    .demand;
    let mut client = tessera_client::Client::connect_control(&s.socket).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = loop {
        let status = client.status().unwrap();
        if let Some(d) = status.tenants.iter().find_map(|t| t.demand) {
            break d;
        }
        assert!(Instant::now() < deadline, "no demand in {status:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = app.kill();
    let _ = app.wait();
    assert!((seen - want).abs() < 1e-3, "daemon says {seen}, the arithmetic {want}");
    assert!((want - 0.5).abs() < 1e-9, "{want}");
}

/// A slice is charged what the tenant's launch gate accounted — its kernels' time,
/// measured for the first launches of a slice and inferred after — not the time it
/// held the slice: a program running 1 ms kernels between 9 ms of CPU work holds its
/// slices for about 200 ms but is charged about 20.
#[test]
fn slices_are_charged_the_gpu_time_used_not_held() {
    let Some(s) = setup_with("account", 1, 1.0) else { return };
    let started = Instant::now();
    let mut app = s
        .app(
            &["launch", "20", "1"],
            &[("TESSERA_SLICE_MS", "30"), ("GAP_MS", "9"), ("HOLD_MS", "5000")],
        )
        .spawn()
        .unwrap();
    wait_for(&mut app, "done");
    let held = started.elapsed();
    // the last slice ends by its time; wait for the daemon to charge it
    std::thread::sleep(Duration::from_millis(100));
    let mut client = tessera_client::Client::connect_control(&s.socket).unwrap();
    let charged = client.status().unwrap().tenants[0].gpu_ms;
    let _ = app.kill();
    let _ = app.wait();
    eprintln!("charged {charged:.1} ms over {:.0} ms", held.as_secs_f64() * 1e3);
    assert!(charged >= 15.0, "20 kernels of 1 ms: {charged} ms");
    assert!(charged < 0.4 * held.as_secs_f64() * 1e3, "{charged} ms charged over {held:?}");
}

/// The driver's own failures reach the program untouched through the interposer: a
/// launch that fails (the fake's knob) returns CUDA_ERROR_LAUNCH_FAILED (719), and an
/// allocation the driver refuses after the ledger granted it returns
/// CUDA_ERROR_OUT_OF_MEMORY, with the reservation undone (logged).
#[test]
fn driver_failures_pass_through() {
    let Some(s) = setup("failures", 1) else { return };
    let (code, out, _) = run(s.app(&["launch", "1", "1"], &[("FAKE_CUDA_FAIL", "launch")]));
    assert_eq!((code, out.lines().last()), (2, Some("error launch 719")), "{out}");
    let (code, out, _) = run(s.app(&["alloc", "100", "0"], &[("FAKE_CUDA_FAIL", "oom")]));
    assert_eq!((code, out.lines().last()), (2, Some("error alloc 2")), "{out}");
    assert!(s.log().contains("alloc 104857600 on 0 -> 2"), "{}", s.log());
}

/// Build `migrate_app.c` next to the fake driver.
pub(super) fn build_migrate_app(s: &Setup) -> PathBuf {
    let artifacts = tessera_driver::testing::nvidia_artifacts().unwrap();
    tessera_driver::testing::build_c_program(
        &artifacts,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/migrate_app.c"),
        &s.dir.join("migrate_app"),
    )
    .unwrap()
}

/// The fake driver's books ("name a b" lines) as numbers per device.
fn fake_stats(s: &Setup) -> std::collections::BTreeMap<String, Vec<u64>> {
    let text = std::fs::read_to_string(s.dir.join("libcuda.so.1.stats")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?.to_string();
            Some((name, w.filter_map(|x| x.parse().ok()).collect()))
        })
        .collect()
}

/// The device each "launch I DEVICE" line reports.
fn launch_devices(out: &str) -> Vec<i32> {
    out.lines()
        .filter_map(|l| l.strip_prefix("launch "))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// DCUDA's migration of an unmodified program (§3.4): a real C program computing
/// y = 2x + y twenty times is moved from GPU 0 to GPU 1 after its tenth launch and
/// gets the same, correct result as without a move. Its device allocations became
/// managed, so its pointers stayed valid; its module was loaded again on GPU 1 when its
/// function was first launched there (a function handle of GPU 0 is invalid on GPU 1
/// in the fake driver, as on a GPU); both allocations were prefetched to GPU 1 and
/// none had to move on demand; its ledger reservation moved with it.
#[test]
fn a_program_migrated_mid_run_computes_the_same_result() {
    let Some(s) = setup("migrate", 2) else { return };
    let app = build_migrate_app(&s);
    let elems = "4096";
    let (code, still, err) = run(s.app_at(&app, &["20", elems], &[]));
    assert_eq!(code, 0, "{still}{err}");
    assert!(launch_devices(&still).iter().all(|d| *d == 0), "{still}");
    let (code, moved, err) = run(s.app_at(&app, &["20", elems], &[("TESSERA_MIGRATE_AT", "10:1")]));
    assert_eq!(code, 0, "{moved}{err}");
    let result = |out: &str| out.lines().find(|l| l.starts_with("result")).map(String::from);
    assert_eq!(result(&moved), result(&still), "the same result: {moved}");
    assert!(result(&moved).is_some_and(|r| r.starts_with("result ok")), "{moved}");
    let devices = launch_devices(&moved);
    assert_eq!(devices[..10], [0; 10], "{moved}");
    assert_eq!(devices[10..], [1; 10], "{moved}");
    let log = s.log();
    assert!(
        log.contains("migrated from GPU 0 to GPU 1 after 10 launches: 32768 bytes of reservations moved, 2 of 2 allocations prefetched"),
        "{log}"
    );
    let stats = fake_stats(&s);
    assert_eq!(stats["prefetched"], vec![0, 32768], "{stats:?}");
    assert_eq!(stats["faults"], vec![0, 0], "nothing moved on demand: {stats:?}");
    // a bad order is a clear error, not a crash
    let (code, out, err) = run(s.app_at(&app, &["2", elems], &[("TESSERA_MIGRATE_AT", "soon")]));
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("TESSERA_MIGRATE_AT"), "{err}");
}

/// The daemon's balancer moves an unmodified program (DCUDA end to end): two
/// migratable programs with GPU-filling kernels are placed on GPU 0 by round-robin
/// placement (an idle tenant registered between them takes GPU 1), so GPU 0 is
/// overloaded; DCUDA's balancer moves a tenant to GPU 1, its next slice is granted
/// there, and its interposer follows between two launches. Both compute the right
/// result, however often they moved.
#[test]
fn the_balancer_moves_a_running_program_to_another_gpu() {
    let Some(s) = setup_config("balance", |c| {
        c.balance = tesserad::config::BalanceName::Dcuda;
    }) else {
        return;
    };
    let app = build_migrate_app(&s);
    // 2M floats: 8192 blocks of 256 threads, more than a GPU holds at once
    let args = ["300", "2097152"];
    let env = [("TESSERA_MIGRATION", "1")];
    let a = s.app_at(&app, &args, &env).spawn().unwrap();
    // the idle tenant registers once the first program has (so round-robin puts it on
    // GPU 1); the program's output is read whole at the end
    let mut idle = tessera_client::Client::connect(&s.socket).unwrap();
    let start = Instant::now();
    while idle.status().unwrap().tenants_total == 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "the first program never registered");
        std::thread::sleep(Duration::from_millis(2));
    }
    idle.register(tessera_client::TenantOptions::batch()).unwrap();
    let c = s.app_at(&app, &args, &env).spawn().unwrap();
    let outputs: Vec<String> = [a, c]
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect();
    for out in &outputs {
        assert!(out.lines().any(|l| l.starts_with("result ok")), "{out}");
    }
    // both started on GPU 0; at least one ran on GPU 1 after a move (which one, and
    // whether a later sample under CPU load moves one again, depends on timing)
    for out in &outputs {
        assert_eq!(launch_devices(out).first(), Some(&0), "{out}");
    }
    assert!(
        outputs.iter().any(|out| launch_devices(out).contains(&1)),
        "one of the two programs moved to GPU 1: {outputs:?}"
    );
    let log = s.log();
    assert!(log.contains("migrated from GPU 0 to GPU 1"), "{log}");
}

/// FairGV end to end (`policy = "fair"`): three unmodified programs with kernels of 2,
/// 5 and 10 ms and weights 1, 2 and 3 share one GPU. Over a window in which all three
/// are backlogged, the GPU time the daemon charged them (its own accounting, from the
/// launch gate) follows the weights. The bound: start-time fair queuing keeps
/// |W_i/w_i − W_j/w_j| within l_i/w_i + l_j/w_j, with a quantum l at most a slice plus
/// one kernel (30 + 10 ms); counting only slices that ended inside the window adds at
/// most one quantum per tenant at each end. Over about 2 s of GPU time that is within
/// 6 points of each entitled share, which the test checks.
#[test]
fn three_programs_share_a_gpu_by_their_weights() {
    let Some(s) = setup_config("fair", |c| {
        c.gpus = 1;
        c.policy = PolicyName::Fair;
        c.executor = ExecutorKind::Emulated { speedup: 1.0 };
    }) else {
        return;
    };
    let programs = [("1", "2"), ("2", "5"), ("3", "10")];
    let mut children: Vec<Child> = programs
        .iter()
        .map(|(weight, ms)| {
            s.app(&["launch", "2000", ms], &[("TESSERA_WEIGHT", weight)]).spawn().unwrap()
        })
        .collect();
    let mut c = tessera_client::Client::connect(&s.socket).unwrap();
    let charged = |c: &mut tessera_client::Client| -> Vec<(u32, f64)> {
        let mut v: Vec<(u32, f64)> =
            c.status().unwrap().tenants.iter().map(|t| (t.weight, t.gpu_ms)).collect();
        v.sort_by_key(|x| x.0);
        v
    };
    let start = Instant::now();
    loop {
        let now = charged(&mut c);
        if now.len() == 3 && now.iter().all(|(_, ms)| *ms > 0.0) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the three never all ran: {now:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    let before = charged(&mut c);
    std::thread::sleep(Duration::from_millis(2000));
    let after = charged(&mut c);
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let got: Vec<f64> = before.iter().zip(&after).map(|(b, a)| a.1 - b.1).collect();
    let total: f64 = got.iter().sum();
    assert!(total > 1000.0, "the GPU was busy: {got:?} ms");
    for ((weight, _), ms) in before.iter().zip(&got) {
        let entitled = f64::from(*weight) / 6.0;
        let received = ms / total;
        eprintln!("weight {weight}: {received:.3} of the GPU time, entitled {entitled:.3}");
        assert!(
            (received - entitled).abs() <= 0.06,
            "weight {weight}: received {received:.3}, entitled {entitled:.3} ({got:?} ms)"
        );
    }
    // the owner can change a weight, within range
    let t = c.register(tessera_client::TenantOptions::batch()).unwrap();
    c.set_weight(t, 4).unwrap();
    assert!(c.set_weight(t, 0).is_err());
    assert_eq!(c.status().unwrap().tenants.iter().find(|x| x.tenant == t).unwrap().weight, 4);
}

/// Kernel slicing in the interposer (issue 58): with `TESSERA_KERNEL_SLICING=1` the
/// program's PTX module is loaded with its kernel's twin, and each of its axpy launches
/// (16 blocks of 256 threads over 4,096 elements), above a threshold of 4 blocks, runs
/// as sub-kernels of 5 blocks (first blocks 0, 5, 10 and 15; the last of 1), each a
/// launch of the twin through the interposer's gated launch path. The result is the
/// unsliced run's: the fake twin computes only its blocks' elements, so a wrong first
/// block, a range missed or run twice, or parameters out of place show in it. Off (the
/// default), nothing is sliced. The same through `cuLaunchKernelEx`, and with the
/// kernel loaded as a CUDA 12 library (`cuLibraryLoadData`, `cuLibraryGetKernel`), with
/// the parameters passed in one buffer (`extra`, to either launch), and with the PTX
/// loaded from a file (`cuModuleLoad`, `cuLibraryLoadFromFile`).
#[test]
fn long_launches_run_as_sub_kernels_of_the_twin_and_compute_the_same() {
    let Some(s) = setup("slicing", 1) else { return };
    let app = build_migrate_app(&s);
    let fake_log = s.dir.join("libcuda.so.1.log");
    let result = |out: &str| out.lines().find(|l| l.starts_with("result")).map(String::from);
    let logged = || {
        let text = std::fs::read_to_string(&fake_log).unwrap_or_default();
        let _ = std::fs::remove_file(&fake_log);
        text
    };
    let (code, whole, err) = run(s.app_at(&app, &["3", "4096"], &[("FAKE_CUDA_LOG", "1")]));
    assert_eq!(code, 0, "{whole}{err}");
    let log = logged();
    assert!(!log.contains("axpy slice"), "sliced while off: {log}");
    assert_eq!(log.matches("cuLaunchKernel 16 256").count(), 3, "{log}");
    let env = [
        ("TESSERA_KERNEL_SLICING", "1"),
        ("TESSERA_KERNEL_SLICE_MIN_BLOCKS", "4"),
        ("TESSERA_KERNEL_SLICE_BLOCKS", "5"),
        ("FAKE_CUDA_LOG", "1"),
    ];
    let (code, sliced, err) = run(s.app_at(&app, &["3", "4096"], &env));
    assert_eq!(code, 0, "{sliced}{err}");
    assert_eq!(result(&sliced), result(&whole), "{sliced}");
    assert!(result(&sliced).is_some_and(|r| r.starts_with("result ok")), "{sliced}");
    let log = logged();
    let slices: Vec<String> =
        log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).map(String::from).collect();
    let one = ["0 5 of 16 1 1", "5 5 of 16 1 1", "10 5 of 16 1 1", "15 1 of 16 1 1"];
    assert_eq!(slices, [one, one, one].concat(), "{log}");
    assert_eq!(log.matches("cuLaunchKernel 16 256").count(), 0, "a whole launch: {log}");
    assert_eq!(log.matches("cuLaunchKernel 5 256").count(), 9, "{log}");
    // the size per multiprocessor (the default's form): the fake GPU's 16 at 0.375 a
    // multiprocessor make sub-kernels of 6 blocks, said once for the GPU
    let interposer_log = s.dir.join("interposer.log");
    let _ = std::fs::remove_file(&interposer_log);
    let per_sm = [
        ("TESSERA_KERNEL_SLICING", "1"),
        ("TESSERA_KERNEL_SLICE_MIN_BLOCKS", "4"),
        ("TESSERA_KERNEL_SLICE_BLOCKS_PER_SM", "0.375"),
        ("FAKE_CUDA_LOG", "1"),
    ];
    let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &per_sm));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(result(&out), result(&whole), "{out}");
    let log = logged();
    let slices: Vec<String> =
        log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).map(String::from).collect();
    let six = ["0 6 of 16 1 1", "6 6 of 16 1 1", "12 4 of 16 1 1"];
    assert_eq!(slices, [six, six, six].concat(), "{log}");
    let said = std::fs::read_to_string(&interposer_log).unwrap_or_default();
    let size_lines = said
        .matches("sub-kernels of 6 blocks on GPU 0 (0.375 per multiprocessor, 16 multiprocessors)")
        .count();
    assert_eq!(size_lines, 1, "{said}");
    // the same through cuLaunchKernelEx (a configuration without attributes)
    let ex = [env.as_slice(), &[("LAUNCH_EX", "1")]].concat();
    let (code, sliced_ex, err) = run(s.app_at(&app, &["3", "4096"], &ex));
    assert_eq!(code, 0, "{sliced_ex}{err}");
    assert_eq!(result(&sliced_ex), result(&whole), "{sliced_ex}");
    let log = logged();
    let slices: Vec<String> =
        log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).map(String::from).collect();
    assert_eq!(slices, [one, one, one].concat(), "{log}");
    // cuLaunchKernelEx with an attribute a sub-kernel may carry (a priority, 8) is
    // sliced; with one that needs the blocks together (cooperative, 2) or that this
    // build does not know (99), it runs whole
    // and one that runs whole is said once in the interposer's log, with the reason
    // (three launches)
    let interposer_log = s.dir.join("interposer.log");
    for (attr, sliced) in [("8", true), ("2", false), ("99", false)] {
        let _ = std::fs::remove_file(&interposer_log);
        let with = [ex.as_slice(), &[("EX_ATTR", attr)]].concat();
        let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &with));
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(result(&out), result(&whole), "attribute {attr}: {out}");
        let log = logged();
        let slices = log.lines().filter(|l| l.starts_with("axpy slice ")).count();
        assert_eq!(slices, if sliced { 12 } else { 0 }, "attribute {attr}: {log}");
        let said = std::fs::read_to_string(&interposer_log).unwrap_or_default();
        let whole_lines =
            said.matches("runs whole: a launch attribute a sub-kernel may not carry").count();
        assert_eq!(whole_lines, if sliced { 0 } else { 1 }, "attribute {attr}: {said}");
    }
    // the parameters in one buffer (`extra`): each sub-kernel gets a copy with the
    // twin's four added at their offset (28, after the u32 n)
    let buffer = [env.as_slice(), &[("EXTRA", "1")]].concat();
    let (code, sliced_buffer, err) = run(s.app_at(&app, &["3", "4096"], &buffer));
    assert_eq!(code, 0, "{sliced_buffer}{err}");
    assert_eq!(result(&sliced_buffer), result(&whole), "{sliced_buffer}");
    let log = logged();
    let slices: Vec<String> =
        log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).map(String::from).collect();
    assert_eq!(slices, [one, one, one].concat(), "{log}");
    assert_eq!(log.matches("launch parameters from a buffer of 44 bytes").count(), 12, "{log}");
    // the same buffer through cuLaunchKernelEx
    let buffer_ex = [buffer.as_slice(), &[("LAUNCH_EX", "1")]].concat();
    let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &buffer_ex));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(result(&out), result(&whole), "{out}");
    let log = logged();
    let slices: Vec<String> =
        log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).map(String::from).collect();
    assert_eq!(slices, [one, one, one].concat(), "{log}");
    assert_eq!(log.matches("launch parameters from a buffer of 44 bytes").count(), 12, "{log}");
    // a buffer said to be shorter than the kernel's parameters runs whole, and the
    // driver refuses it as it refuses the program's own (not a twin on zeros)
    let short = [buffer.as_slice(), &[("EXTRA_SIZE", "20")]].concat();
    let (code, out, _) = run(s.app_at(&app, &["3", "4096"], &short));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("error launch"), "{out}");
    let log = logged();
    assert!(!log.contains("axpy slice"), "a twin ran on a short buffer: {log}");
    // the same with the kernel loaded as a CUDA 12 library (cuLibraryLoadData, as
    // cuda-core loads PTX) and launched by its kernel handle
    let library = [env.as_slice(), &[("LIBRARY", "1")]].concat();
    let (code, sliced_lib, err) = run(s.app_at(&app, &["3", "4096"], &library));
    assert_eq!(code, 0, "{sliced_lib}{err}");
    assert_eq!(result(&sliced_lib), result(&whole), "{sliced_lib}");
    let log = logged();
    let slices: Vec<String> =
        log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).map(String::from).collect();
    assert_eq!(slices, [one, one, one].concat(), "{log}");
    assert!(log.contains("cuLibraryGetKernel tessera_axpy__tessera_slice"), "{log}");
    // the same with the PTX in a file, loaded with cuModuleLoad or (a library)
    // cuLibraryLoadFromFile: loaded with the twin as from memory
    let ptx_file = s.dir.join("axpy.ptx");
    let file = ptx_file.to_str().unwrap();
    for (what, extra) in [("cuModuleLoad", None), ("cuLibraryLoadFromFile", Some(("LIBRARY", "1")))]
    {
        let from_file = [env.as_slice(), &[("FROM_FILE", file)], extra.as_slice()].concat();
        let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &from_file));
        assert_eq!(code, 0, "{what}: {out}{err}");
        assert_eq!(result(&out), result(&whole), "{what}: {out}");
        let log = logged();
        let slices: Vec<String> =
            log.lines().filter_map(|l| l.strip_prefix("axpy slice ")).map(String::from).collect();
        assert_eq!(slices, [one, one, one].concat(), "{what}: {log}");
        // not read by the driver: loaded from the rewritten text
        assert!(!log.contains(&format!("{what} ")), "{what}: {log}");
        // slicing off: the driver reads the file itself
        let off: Vec<_> =
            from_file.iter().filter(|(k, _)| *k != "TESSERA_KERNEL_SLICING").collect();
        let off: Vec<(&str, &str)> = off.into_iter().copied().collect();
        let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &off));
        assert_eq!(code, 0, "{what}: {out}{err}");
        assert_eq!(result(&out), result(&whole), "{what}: {out}");
        let log = logged();
        assert!(log.contains(&format!("{what} {file}")), "{what}: {log}");
        assert!(!log.contains("axpy slice"), "{what}: {log}");
    }
    // a PTX file with nothing to slice goes to the driver by its name, as the program
    // gave it (not as a buffer the hook read and frees on return)
    let whole_file = [env.as_slice(), &[("FROM_FILE", file), ("FILE_WHOLE", "1")]].concat();
    let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &whole_file));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(result(&out), result(&whole), "{out}");
    let log = logged();
    // (the driver read the file: the fake logs its name)
    assert!(log.contains(&format!("cuModuleLoad {file}")), "{log}");
    assert!(!log.contains("axpy slice"), "{log}");
    // a file that cannot be read is the driver's to refuse, as without tessera
    let missing = s.dir.join("missing.ptx");
    let missing =
        [env.as_slice(), &[("FROM_FILE", missing.to_str().unwrap()), ("FROM_FILE_UNWRITTEN", "1")]]
            .concat();
    let (code, out, _) = run(s.app_at(&app, &["3", "4096"], &missing));
    assert_ne!(code, 0, "{out}");
    // CUDA_ERROR_FILE_NOT_FOUND
    assert!(out.contains("error module 301"), "{out}");
    // a function handle handed out again for a kernel without a twin launches whole:
    // the twin noted for the handle before is not used
    let second = [env.as_slice(), &[("SECOND_MODULE", "1")]].concat();
    let (code, out, err) = run(s.app_at(&app, &["3", "4096"], &second));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(result(&out), result(&whole), "{out}");
    let log = logged();
    assert!(!log.contains("axpy slice"), "the old twin was launched: {log}");
    assert_eq!(log.matches("cuLaunchKernel 16 256").count(), 3, "{log}");
    // a bad setting is a clear error
    let (code, out, err) =
        run(s.app_at(&app, &["1", "4096"], &[("TESSERA_KERNEL_SLICING", "yes")]));
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("TESSERA_KERNEL_SLICING"), "{err}");
}
