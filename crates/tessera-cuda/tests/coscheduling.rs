//! GPU-centric coscheduling (FairGV §3.2.3; issue 58 item 4) on a loaded host: an
//! interactive program (a 50 us kernel, a synchronous wait and 50 us of CPU work per
//! iteration: far more than FairGV's 10 synchronous calls per 10 ms) shares one GPU at weights 1:1 with a batch program of 20 ms kernels,
//! while three CPU-bound processes share the interactive program's CPU. With
//! coscheduling the daemon raises the interactive program's threads while its slice
//! lasts; without, its woken thread waits in the run queue behind them. Measured: its
//! iterations per second, and each program's share of the GPU time received (the fake
//! driver's books), with coscheduling on and off in one test.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One run: (the interactive program's iterations per second, its share of the GPU
/// time both received, the batch program's share, slices coscheduled).
fn run(coscheduling: bool, sync_ctx: bool) -> Option<(f64, f64, f64, u64)> {
    let tag = match (coscheduling, sync_ctx) {
        (false, _) => "cosched-off",
        (true, false) => "cosched-on",
        (true, true) => "cosched-on-ctx",
    };
    let s = setup_config(tag, |c| {
        c.gpus = 1;
        c.policy = tesserad::config::PolicyName::Fair;
        c.executor = tesserad::config::ExecutorKind::Emulated { speedup: 1.0 };
        c.coscheduling = coscheduling;
    })?;
    let prefix = s.dir.join("timeline");
    // three CPU-bound processes on CPU 0, the interactive program's; each stops once
    // this test's process is gone (taskset execs the shell, so its parent is this
    // process), so that a test run killed midway leaves no CPU-bound process behind
    // to slow every later run on the host (`Reaped` stops them otherwise)
    let hogs: Vec<Reaped> = (0..3)
        .map(|_| {
            Reaped(
                Command::new("taskset")
                    .args(["-c", "0", "sh", "-c", "while kill -0 $PPID 2>/dev/null; do :; done"])
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let app = s.app.to_str().unwrap().to_string();
    let pinned = |cpu: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["-c", cpu, app.as_str()];
        all.extend_from_slice(args);
        let mut c = s.app_at(Path::new("taskset"), &all, env);
        c.env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0");
        Reaped(c.spawn().unwrap())
    };
    let mut batch = pinned("1", &["launch", "150", "20"], &[]);
    let env: &[(&str, &str)] =
        if sync_ctx { &[("CPU_US", "200"), ("SYNC_CTX", "1")] } else { &[("CPU_US", "200")] };
    let mut inter = pinned("0", &["launch", "4000", "0.05"], env);
    let (i_out, _) = read_all(&mut inter, Duration::from_secs(60));
    let (_, _) = read_all(&mut batch, Duration::from_secs(60));
    drop(hogs);
    let status = tessera_client::Client::connect_control(&s.socket)
        .and_then(|mut c| c.status())
        .map(|r| r.totals.coscheduled)
        .unwrap_or(0);
    let runs = [kernels_of(&prefix, inter.id()), kernels_of(&prefix, batch.id())];
    // while both ran
    let from = runs.iter().map(|r| r.first().map_or(0, |k| k.0)).max().unwrap_or(0);
    let to = runs.iter().map(|r| r.last().map_or(0, |k| k.1)).min().unwrap_or(0);
    let received = |r: &[(u64, u64)]| {
        r.iter().map(|(a, b)| (*b).min(to).saturating_sub((*a).max(from))).sum::<u64>() as f64
    };
    let (ri, rb) = (received(&runs[0]), received(&runs[1]));
    // the interactive program's iterations in that window (its "launch T" lines)
    let iterations = i_out
        .lines()
        .filter_map(|l| l.strip_prefix("launch ")?.parse::<u64>().ok())
        .filter(|t| (from..to).contains(t))
        .count();
    let window = to.saturating_sub(from) as f64 / 1e9;
    assert!(window > 1.0, "{tag}: the programs ran side by side for {window} s only");
    Some((iterations as f64 / window, ri / (ri + rb), rb / (ri + rb), status))
}

/// Read a program's stdout to its end (it exits), at most `limit`.
fn read_all(child: &mut Reaped, limit: Duration) -> (String, i32) {
    use std::io::Read;
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let code = finish_within(child, limit, "program");
    (out, code)
}

#[test]
fn coscheduling_speeds_an_interactive_program_on_a_loaded_host() {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").map_or(1, |m| m.uid()) != 0 {
        eprintln!("SKIPPED: raising a thread's priority needs root (CAP_SYS_NICE)");
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("SKIPPED: the test pins the two programs to two CPUs");
        return;
    }
    let Some(off) = run(false, false) else { return };
    let Some(on) = run(true, false) else { return };
    // the same program waiting with cuCtxSynchronize (cudaDeviceSynchronize's call) is
    // classified alike
    let Some(on_ctx) = run(true, true) else { return };
    eprintln!(
        "interactive iterations/s: off {:.0}, on {:.0} ({:.2}x), on waiting with \
         cuCtxSynchronize {:.0}; shares (interactive, batch): off {:.2} {:.2}, on {:.2} {:.2}; \
         slices coscheduled: off {}, on {}, on with cuCtxSynchronize {}",
        off.0,
        on.0,
        on.0 / off.0,
        on_ctx.0,
        off.1,
        off.2,
        on.1,
        on.2,
        off.3,
        on.3,
        on_ctx.3
    );
    assert_eq!(off.3, 0, "coscheduling off boosted a slice");
    assert!(on.3 > 0, "no slice of the interactive program was coscheduled");
    assert!(on_ctx.3 > 0, "no slice was coscheduled when it waits with cuCtxSynchronize");
    assert!(on.0 >= 1.2 * off.0, "coscheduling did not speed the interactive program");
    // the fair queue's bound either way: the interactive program (which does not use
    // its whole share: its own demand is a few percent of the GPU) never receives more
    // than its share, and the batch program, always backlogged, at least its own
    for (what, r) in [("off", off), ("on", on)] {
        assert!(r.1 <= 0.6 && r.2 >= 0.4, "{what}: shares {:.2} / {:.2}", r.1, r.2);
    }
}

/// A program's class follows its phases (issue 58 item 4: "measured by the interposer,
/// continuously, so phases are followed"): one that makes a synchronous call every
/// iteration (interactive) and then only launches, beside a batch program of 20 ms
/// kernels, is coscheduled in its first phase and not in the second. Before the
/// interposer published its span up to its own clock's now as it waited for a slice,
/// the daemon judged it by its last 11 calls however long ago, and it stayed
/// interactive for as long as it made no other synchronous call.
#[test]
fn coscheduling_follows_a_program_out_of_its_interactive_phase() {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").map_or(1, |m| m.uid()) != 0 {
        eprintln!("SKIPPED: raising a thread's priority needs root (CAP_SYS_NICE)");
        return;
    }
    let Some(s) = setup_config("cosched-phases", |c| {
        c.gpus = 1;
        c.policy = tesserad::config::PolicyName::Fair;
        c.executor = tesserad::config::ExecutorKind::Emulated { speedup: 1.0 };
        c.coscheduling = true;
    }) else {
        return;
    };
    let app = s.app.to_str().unwrap();
    let mut batch =
        Reaped(s.app_at(Path::new(app), &["launch", "100", "20"], &[]).spawn().unwrap());
    // 1,000 iterations with a synchronous wait, then 3,000 launches alone, 200 us of CPU
    // work after each
    let env = [("CPU_US", "200"), ("ASYNC_FROM", "1000"), ("PRINT_NICE", "1")];
    let mut phased =
        Reaped(s.app_at(Path::new(app), &["launch", "4000", "0.05"], &env).spawn().unwrap());
    let (out, code) = read_all(&mut phased, Duration::from_secs(60));
    let _ = read_all(&mut batch, Duration::from_secs(60));
    assert_eq!(code, 0, "{out}");
    let nice: Vec<(u64, i32)> = out
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("nice ")?.split(' ');
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect();
    let raised = |from: u64, to: u64| {
        let it: Vec<_> = nice.iter().filter(|(i, _)| (from..to).contains(i)).collect();
        it.iter().filter(|(_, n)| *n < 0).count() as f64 / it.len().max(1) as f64
    };
    let (first, second) = (raised(0, 1000), raised(2000, 4000));
    eprintln!(
        "iterations raised (coscheduled): interactive phase {:.1}%, the launches-only phase's second half {:.1}%",
        100.0 * first,
        100.0 * second
    );
    assert!(first > 0.0, "the interactive phase was never coscheduled");
    assert_eq!(second, 0.0, "the launches-only phase was still coscheduled");
}
