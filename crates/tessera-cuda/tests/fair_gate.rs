//! The launch gate's fairness on one shared GPU (FairGV §3.2–3.3), measured as the GPU
//! time each program really received, from the fake driver's books of whose kernels
//! ran when; and its work conservation: a program alone on its GPU keeps its slice
//! (renewed by the daemon) instead of draining its queue at every slice's end.

use crate::common::*;
use std::time::Duration;

/// One measurement of this file at a time: each is in wall-clock time, and two side by
/// side on a 2-core host skew both (every test here takes it).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What two programs received while both ran (`fair_run`).
struct Received {
    /// GPU seconds each program's kernels ran within the window.
    gpu: [f64; 2],
    /// The window's length: from the later first kernel to the earlier last one, s.
    window: f64,
    /// How long each program's launching thread waited for a CPU (its run-queue wait,
    /// from /proc's schedstat, as the program itself read it), s.
    waited: [f64; 2],
    /// How long the daemon's core thread (in this test process) waited for a CPU
    /// while the two ran, s: each grant of a slice waits for it.
    daemon_waited: f64,
}

/// A thread of this process's run-queue wait so far, s (the second field of its
/// schedstat; 0 where /proc does not say).
fn runqueue_wait_s(tid: Option<i32>) -> f64 {
    tid.and_then(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/schedstat")).ok())
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

impl Received {
    /// What a share measured here may stray beyond its band because a program was
    /// descheduled: a program waiting for a CPU asks nothing of the GPU, and the fair
    /// queue (work-conserving) gives its turn to the other — the longer wait of the two
    /// as a fraction of the window, at most 0.15 (so a gross defect still fails). A
    /// clean-clone CI run measured 0.36 for the 1:3 case's weight-1 share (want 0.25 ±
    /// 0.1) while the suite's other binaries loaded both cores; unloaded runs, 0.22-0.30.
    fn descheduled(&self) -> f64 {
        (self.waited[0].max(self.waited[1]) / self.window.max(1e-9)).min(0.15)
    }
}

/// Run two programs (args and settings each) as tenants of a fair-queuing daemon on
/// one GPU that the fake driver's timeline makes really shared (a kernel starts when
/// the other program's ends); what each received while both ran.
fn fair_run(
    tag: &str,
    a: (&[&str], &[(&str, &str)]),
    b: (&[&str], &[(&str, &str)]),
) -> Option<Received> {
    // one pair of programs at a time: the shares are measured in wall-clock time, and
    // two pairs on a 2-core host (the tests of this binary run in parallel) made the
    // charge test's share 0.62 in one suite run of four (want 0.5 ± 0.1; it had failed
    // so under a parallel build before, and passed alone every time)
    let _turn = one_at_a_time();
    let s = setup_config(tag, |c| {
        c.gpus = 1;
        c.policy = tesserad::config::PolicyName::Fair;
        c.executor = tesserad::config::ExecutorKind::Emulated { speedup: 1.0 };
    })?;
    let prefix = s.dir.join("timeline");
    let core = s.daemon.as_ref().and_then(tesserad::Daemon::core_thread);
    let daemon_wait_before = runqueue_wait_s(core);
    let spawn = |(args, env): (&[&str], &[(&str, &str)])| {
        let mut c = s.app(args, env);
        c.env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0").env("PRINT_RUNQUEUE", "1");
        let mut child = Reaped(c.spawn().unwrap());
        // read as it is written: a program blocked on a full pipe would ask nothing
        let mut out = child.0.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut text);
            text
        });
        (child, reader)
    };
    let ((mut pa, ra), (mut pb, rb)) = (spawn(a), spawn(b));
    assert_eq!(finish_within(&mut pa, Duration::from_secs(60), "program a"), 0);
    assert_eq!(finish_within(&mut pb, Duration::from_secs(60), "program b"), 0);
    let daemon_waited = runqueue_wait_s(core) - daemon_wait_before;
    let runqueue_s = |reader: std::thread::JoinHandle<String>| {
        let text = reader.join().unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("runqueue ")?.trim().parse::<f64>().ok())
            .map_or(0.0, |ns| ns / 1e9)
    };
    let waited = [runqueue_s(ra), runqueue_s(rb)];
    let runs = [kernels_of(&prefix, pa.id()), kernels_of(&prefix, pb.id())];
    let from = runs.iter().map(|r| r.first().map_or(0, |k| k.0)).max().unwrap_or(0);
    let to = runs.iter().map(|r| r.last().map_or(0, |k| k.1)).min().unwrap_or(0);
    let received = |r: &[(u64, u64)]| {
        r.iter().map(|(s, e)| (*e).min(to).saturating_sub((*s).max(from))).sum::<u64>() as f64 / 1e9
    };
    Some(Received {
        gpu: [received(&runs[0]), received(&runs[1])],
        window: to.saturating_sub(from) as f64 / 1e9,
        waited,
        daemon_waited,
    })
}

/// Fair shares that cannot be gamed (FairGV §3.2–3.3), measured as the GPU time each
/// program really received — from the fake driver's books of whose kernels ran when on
/// one shared GPU, not from the daemon's charges:
/// (a) 100 ms kernels beside 2 ms kernels, at weights 1:1 and 1:3: each receives its
///     weight's share within 0.1, widened by the time a program was measured waiting
///     for a CPU (`Received::descheduled`, at most 0.15) (before, at 1:1: the long kernels' program received
///     98%, since a kernel still running at its slice's end was charged nothing and the
///     next slice's holder was charged its wait behind it);
/// (b) 1 ms of work every 30 ms beside a GPU-bound program, at weights 1:1 and 1:3: the
///     light program receives at least 70% of what it asks, and the GPU-bound one at
///     least half of the rest (before, at 1:1: 0.15 s of 2.94 s, 5% — the light one
///     kept each slice it was granted while it computed on the CPU).
#[test]
fn fair_shares_are_received_whatever_the_kernels() {
    let weight = |w: &'static str| [("TESSERA_WEIGHT", w)];
    for (wa, wb) in [("1", "1"), ("1", "3")] {
        let (wa_env, wb_env) = (weight(wa), weight(wb));
        let Some(run) = fair_run(
            &format!("fair-a-{wa}{wb}"),
            (&["launch", "20", "100"], &wa_env),
            (&["launch", "1500", "2"], &wb_env),
        ) else {
            return;
        };
        let want: f64 =
            wa.parse::<f64>().unwrap() / (wa.parse::<f64>().unwrap() + wb.parse::<f64>().unwrap());
        let [long, short] = run.gpu;
        let got = long / (long + short);
        let band = 0.1 + run.descheduled();
        eprintln!(
            "(a) weights {wa}:{wb}: 100 ms kernels {long:.2} s, 2 ms kernels {short:.2} s: share {got:.2} (want {want:.2} ± {band:.2}; waited for a CPU {:.2} s and {:.2} s of {:.2})",
            run.waited[0], run.waited[1], run.window
        );
        assert!(
            (got - want).abs() <= band,
            "weights {wa}:{wb}: 100 ms kernels received {long:.2} s, 2 ms kernels {short:.2} s: share {got:.2}, want {want:.2} ± {band:.2}"
        );
    }
    for (wa, wb) in [("1", "1"), ("1", "3")] {
        let (wa_env, wb_env) = (weight(wa), weight(wb));
        let light_env = [wa_env[0], ("GAP_MS", "29")];
        let Some(Received { gpu: [light, heavy], window, waited, daemon_waited }) = fair_run(
            &format!("fair-b-{wa}{wb}"),
            (&["launch", "100", "1"], &light_env),
            (&["launch", "2500", "2"], &wb_env),
        ) else {
            return;
        };
        // what it asks: 1 ms per nominal 30 ms cycle. Its cycle is longer by the wait
        // for the GPU-bound program's slice to end (up to a 30 ms slice) and by its own
        // wake-ups, which grow with the machine's load: 82% was measured on an idle
        // machine and 79% on a loaded 2-core CI run (0.099 s of 0.125 s), both with all
        // of its kernels run. Starving it would leave far less; 70% keeps a margin.
        // While it, or the daemon that grants its slices, waited for a CPU, its cycle
        // stretched by the machine, not by the fair queue: that time is not counted (a
        // clean-clone CI run, the suite's other tests loading both cores, stretched its
        // window at 1:3 to 4.95 s, 0.165 s "asked" of the 0.1 s its 100 kernels hold).
        let asked = (window - waited[0] - daemon_waited).max(0.0) / 0.030 * 0.001;
        assert!(
            light >= 0.7 * asked,
            "weights {wa}:{wb}: the light program received {light:.3} s of the {asked:.3} s it asked (window {window:.2} s; waited for a CPU {:.2} s, the daemon {daemon_waited:.2} s)",
            waited[0]
        );
        eprintln!(
            "(b) weights {wa}:{wb}: light {light:.3} s of {asked:.3} asked, heavy {heavy:.2} s of {:.2} left (waited for a CPU {:.2} s and {:.2} s, the daemon {daemon_waited:.2} s)",
            window - light,
            waited[0],
            waited[1]
        );
        // each 30 ms cycle of the light program leaves the GPU idle for the spin budget
        // (2 ms) and the watcher's look (up to 0.5 ms) before the slice is given back,
        // and a slice hand-off each way: about 83% was measured on an idle machine, 70%
        // on a loaded 2-core CI run (wall-clock waits grow with load). The defect this
        // guards gave 5%; half keeps a wide margin on both sides
        assert!(
            heavy >= 0.5 * (window - light),
            "weights {wa}:{wb}: the GPU-bound program received {heavy:.2} s of the {:.2} s left",
            window - light
        );
    }
}

/// The slice's last charge is measured (FairGV §3.3): a program whose slices begin
/// with short kernels — the launches the gate measures — and then queue a long one
/// unsynchronised, counted at the short ones' mean, receives its weight's share, not
/// the long kernels' length beyond it. Measured as the GPU time each program received
/// from the fake driver's books, beside a program of 2 ms kernels at weight 1:1: the
/// gaming program's share within 0.15 of 0.5 (before: the slice ended on time with the
/// long kernel still running, charged the mean, and the next holder waited behind it).
#[test]
fn a_long_kernel_behind_measured_ones_is_charged_as_it_ran() {
    let Some(run) = fair_run(
        "fair-c",
        (&["launch", "60", "2"], &[("ASYNC_EVERY", "6")]),
        (&["launch", "1500", "2"], &[]),
    ) else {
        return;
    };
    let [gaming, plain] = run.gpu;
    let got = gaming / (gaming + plain);
    let band = 0.15 + run.descheduled();
    eprintln!(
        "(c) gaming {gaming:.2} s, plain {plain:.2} s: share {got:.2} (want 0.50 ± {band:.2}; waited for a CPU {:.2} s and {:.2} s of {:.2})",
        run.waited[0], run.waited[1], run.window
    );
    // within 0.15: a wall-clock measurement, whose plain program (a sync after each
    // 2 ms kernel) uses less of its share when the host is loaded. Measured on the
    // 2-core development machine (2026-11-28): 0.48-0.58 alone and under load in the
    // tree, 0.61-0.64 in three clean-clone suite runs of six. The defect this guards
    // gave 1.00
    assert!(
        (got - 0.5).abs() <= band,
        "the gaming program received {gaming:.2} s, the plain one {plain:.2} s: share {got:.2}, want 0.50 ± {band:.2}"
    );
}

/// The daemon's record of a tenant that departed: (slices done, GPU time charged, s),
/// from its events log (waited for: the daemon hears of the exit on its own time).
fn departed(events: &std::path::Path, pid: u32) -> Option<(u64, f64)> {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < end {
        let text = std::fs::read_to_string(events).unwrap_or_default();
        let lines: Vec<serde_json::Value> =
            text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let tenant = lines
            .iter()
            .find(|e| e["event"] == "admitted" && e["pid"] == pid)
            .and_then(|e| e["tenant"].as_u64());
        if let Some(e) = lines.iter().find(|e| {
            e["event"] == "departed" && tenant.is_some() && e["tenant"].as_u64() == tenant
        }) {
            return Some((e["done"].as_u64()?, e["gpu_ms"].as_f64()? / 1e3));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A fair daemon on one emulated GPU in real time, logging its events to `events`.
fn fair_node(tag: &str, events: &std::path::Path) -> Option<Setup> {
    let events = events.to_path_buf();
    setup_config(tag, move |c| {
        c.gpus = 1;
        c.policy = tesserad::config::PolicyName::Fair;
        c.executor = tesserad::config::ExecutorKind::Emulated { speedup: 1.0 };
        c.events = Some(events);
    })
}

/// Issue 52, from the H200 (2026-11-28): ResNet-18 training alone on its GPU took 19%
/// longer a step under tessera (15.9 ms against 13.3 ms; its kernels' own time 13.4
/// ms), because at each 30 ms slice's end the gate gave the GPU back — draining the
/// launches PyTorch keeps queued ahead — and measured the next slice's first five
/// launches synchronously, though no one else wanted the GPU. Now such a slice goes
/// on: a program queueing 300 kernels of 2 ms alone (0.6 s, 20 slices' worth) ends
/// with one slice done (the old code: one per 30 ms of GPU time, about 20), and is
/// charged what its kernels ran (the fake driver's books), within a quarter.
#[test]
fn a_program_alone_on_its_gpu_keeps_its_slice_and_is_charged_what_it_ran() {
    let events = std::env::temp_dir().join(format!("tessera-lone-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&events);
    let _turn = one_at_a_time();
    let Some(s) = fair_node("lone", &events) else { return };
    let prefix = s.dir.join("timeline");
    let mut c = s.app(&["launch", "300", "2"], &[("ASYNC_EVERY", "1000000")]);
    c.env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0");
    let mut p = Reaped(c.spawn().unwrap());
    assert_eq!(finish_within(&mut p.0, Duration::from_secs(60), "the program"), 0);
    let kernels = kernels_of(&prefix, p.0.id());
    assert_eq!(kernels.len(), 300, "the fake driver's books: {kernels:?}");
    let ran = kernels.iter().map(|(s, e)| e - s).sum::<u64>() as f64 / 1e9;
    let (done, charged) = departed(&events, p.0.id()).expect("the daemon logs the departure");
    let _ = std::fs::remove_file(&events);
    eprintln!(
        "alone: {done} slice(s) done, charged {charged:.3} s, its kernels ran {ran:.3} s\n{}",
        s.log()
    );
    // 1-2 measured here (the last one as the program ends); a loaded host can
    // deschedule it long enough for the watcher to take it for idle now and then.
    // Beside 4 CPU-bound processes on 2 cores the charge was 0.42-0.56 s (3 of 5 runs
    // outside the quarter) while launches made during the watcher's wait were dropped
    // as done; counted as in flight since, 0.519-0.536 s in six runs
    assert!(done <= 4, "a program alone on its GPU gave its slice back {done} times: {}", s.log());
    assert!(
        (charged - ran).abs() <= 0.25 * ran,
        "charged {charged:.3} s for {ran:.3} s of kernels"
    );
}

/// The other side of keeping a slice: a program that arrives while another holds a
/// renewed slice is not kept waiting — the daemon ends that slice at its time instead
/// of renewing it, and the holder, paced while alone, has at most about two slices
/// queued to wait behind. Two programs of 2 ms kernels at 1:1, the first queueing its
/// 1000 kernels as fast as it can, the second started 300 ms later: while both run,
/// the second receives half of the GPU within 0.15 (unpaced, the first had queued all
/// of its 2 s of kernels alone, and the two never ran side by side at all).
#[test]
fn a_program_arriving_beside_a_renewed_slice_receives_its_share() {
    let events = std::env::temp_dir().join(format!("tessera-late-{}.jsonl", std::process::id()));
    let _turn = one_at_a_time();
    let Some(s) = fair_node("late", &events) else { return };
    let prefix = s.dir.join("timeline");
    let spawn = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = s.app(args, env);
        c.env("FAKE_CUDA_TIMELINE", &prefix).env("FAKE_CUDA_STATS", "0");
        Reaped(c.spawn().unwrap())
    };
    let mut first = spawn(&["launch", "1000", "2"], &[("ASYNC_EVERY", "1000000")]);
    std::thread::sleep(Duration::from_millis(300));
    let mut second = spawn(&["launch", "300", "2"], &[]);
    assert_eq!(finish_within(&mut second.0, Duration::from_secs(60), "the second program"), 0);
    assert_eq!(finish_within(&mut first.0, Duration::from_secs(60), "the first program"), 0);
    let _ = std::fs::remove_file(&events);
    let runs = [kernels_of(&prefix, first.0.id()), kernels_of(&prefix, second.0.id())];
    let from = runs[1].first().map_or(0, |k| k.0);
    let to = runs[1].last().map_or(0, |k| k.1).min(runs[0].last().map_or(0, |k| k.1));
    let received = |r: &[(u64, u64)]| {
        r.iter().map(|(s, e)| (*e).min(to).saturating_sub((*s).max(from))).sum::<u64>() as f64
    };
    let (a, b) = (received(&runs[0]), received(&runs[1]));
    let share = b / (a + b);
    eprintln!("late: the second program's share {share:.2} over {:.2} s", (to - from) as f64 / 1e9);
    assert!((share - 0.5).abs() <= 0.15, "the second program received {share:.2} of the GPU");
}

/// The self-test's fair-weights check on the fake driver: two programs waiting on each
/// 2 ms kernel, at weights 1:3, the weight-1 one receives 0.25 ± 0.1 of the GPU time
/// while both run (the self-test's ±0.05 is judged on a GPU; here, a wall-clock
/// measurement on a host the suite loads, the band of the 1:3 case above) (on the H200, 2026-11-28, the self-test measured 0.26-0.31 in
/// six runs: above the share in every one).
#[test]
fn synchronous_programs_at_weights_1_to_3_receive_a_quarter_and_three() {
    let Some(run) = fair_run(
        "fair-sync-13",
        (&["launch", "1000", "2"], &[("TESSERA_WEIGHT", "1")]),
        (&["launch", "1000", "2"], &[("TESSERA_WEIGHT", "3")]),
    ) else {
        return;
    };
    let [one, three] = run.gpu;
    let got = one / (one + three);
    let band = 0.1 + run.descheduled();
    eprintln!(
        "(d) weights 1:3, 2 ms kernels each waited on: {one:.2} s and {three:.2} s: share {got:.3} (want 0.25 ± {band:.2}; waited for a CPU {:.2} s and {:.2} s of {:.2})",
        run.waited[0], run.waited[1], run.window
    );
    assert!(
        (got - 0.25).abs() <= band,
        "weight 1 received {got:.3} of the GPU (want 0.25 ± {band:.2})"
    );
}
