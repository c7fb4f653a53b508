//! The FairGV experiment end to end, short: every setup, benchmark and scheduler runs,
//! every claim is judged, and a second run gives the same numbers. One short run (0.5 s
//! of simulated time per run, every constant's sensitivity included) serves every test
//! here; the full run (4 s) is `tessera sim fairgv`'s, and its committed results are
//! checked by `scripts/results-unchanged.sh`, not by every test run.

use std::sync::OnceLock;
use tessera_sim::experiments::fairgv::{FairgvResults, report, run_for};

/// The short run the tests share.
fn short() -> &'static FairgvResults {
    static RUN: OnceLock<FairgvResults> = OnceLock::new();
    RUN.get_or_init(|| run_for(0.5).unwrap())
}

#[test]
fn a_short_fairgv_experiment_runs_and_judges_every_claim() {
    let r = short();
    assert_eq!(r.rows.len(), (4 + 2) * 4);
    for x in &r.rows {
        assert!(x.mmr > 0.0 && x.mmr <= 1.0 + 1e-9, "{x:?}");
        assert!(x.overhead > 0.0 && x.overhead.is_finite(), "{x:?}");
        assert!(x.normalized.iter().all(|v| v.is_finite() && *v > 0.0), "{x:?}");
        assert_eq!(x.completion_s.len(), x.weights.len());
        assert!(x.completion_s.iter().all(|v| v.is_finite() && *v > 0.0), "{x:?}");
    }
    assert_eq!(r.claims.len(), 32);
    assert_eq!(r.work_conserving.len(), 4 * 2);
    assert_eq!(r.collaborative.len(), 2 * 8 * 2);
    assert!(r.work_conserving.iter().all(|x| x.gpu_busy > 0.0 && x.gpu_busy <= 1.0));
    assert!(r.collaborative.iter().all(|x| x.normalized_run_time.is_finite()));
    assert!(r.claims.iter().all(|c| c.ours.is_some()));
    // every constant of ours varied, every claim of the setting judged at each value
    assert_eq!(r.sensitivity.len(), 12);
    for c in &r.sensitivity {
        assert!(c.claims.len() >= 17, "{}: {}", c.constant, c.claims.len());
        assert!(c.values[0] != c.values[1] && c.values[1] != c.values[2], "{c:?}");
    }
    // deterministic: two runs give the same numbers (shorter ones, to spare the time;
    // the same code paths)
    assert_eq!(run_for(0.1).unwrap().rows, run_for(0.1).unwrap().rows, "deterministic");
    assert!(report(r).contains("## Claims"));
    // the files `tessera sim fairgv` writes, from this run (the full one writes the same
    // files from a longer run)
    let dir = std::env::temp_dir().join(format!("tessera-fairgv-test-{}", std::process::id()));
    tessera_sim::experiments::fairgv::write(r, &dir).unwrap();
    for f in [
        "results.json",
        "report.md",
        "fig8.svg",
        "fig9.svg",
        "fig10.svg",
        "fig11.svg",
        "table4.svg",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(run_for(0.0).is_err());
}

/// Strict is Credit with Pegasus's coscheduling requests and polling VMs (§5.3): on the
/// interactive BS and SRD1 it must behave unlike Credit-hs, whose VMs spin then yield
/// (the two gave the same numbers to three decimals when Strict's VMs spun too).
#[test]
fn strict_and_credit_hs_differ_on_the_interactive_benchmarks() {
    let r = short();
    let mmr = |b: &str, s: &str| {
        r.rows
            .iter()
            .find(|x| x.setup == "non-congested" && x.benchmark == b && x.scheduler == s)
            .unwrap()
            .mmr
    };
    for b in ["BS", "SRD1"] {
        let (strict, hs) = (mmr(b, "Strict"), mmr(b, "Credit-hs"));
        assert!((strict - hs).abs() > 0.05, "{b}: Strict {strict}, Credit-hs {hs}");
    }
}

/// Overhead is the ideal aggregated throughput — the same program run alone natively —
/// over the measured (§5.4.1). SRD1 alone leaves its CPU and GPU idle in turn, so a
/// scheduler that keeps three VMs near that pace is near 1; measured against a capacity
/// with CPU and GPU both busy (which SRD1 cannot reach) every scheduler was above 1.5.
#[test]
fn overhead_is_against_the_program_alone() {
    let r = short();
    let x = r
        .rows
        .iter()
        .find(|x| x.setup == "non-congested" && x.benchmark == "SRD1" && x.scheduler == "FairGV")
        .unwrap();
    assert!(x.overhead < 1.3, "{x:?}");
}

/// Issue 57 item 9: the experiment judges the GPU-side wait the daemon runs (the
/// daemon ran 2 ms while the experiment judged 50 µs), and the report states it with
/// its history and its sensitivity.
#[test]
fn the_experiment_judges_the_turn_wait_the_daemon_runs() {
    use tessera_core::policies::fair::TURN_WAIT;
    use tessera_sim::experiments::fairgv::setting::Constants;
    let r = short();
    assert_eq!(Constants::DEFAULT.turn_wait, TURN_WAIT);
    assert_eq!(r.constants.turn_wait, TURN_WAIT);
    let text = report(r);
    assert!(text.contains("**The GPU's turn wait**"), "{text}");
    assert!(text.contains("daemon 2 ms"), "{text}");
    assert!(r.sensitivity.iter().any(|v| v.constant == "turn_wait"), "no turn_wait sensitivity");
}

/// Issue 57 item 11: the gate's rule lives in one place (`tessera_core::gate`), which
/// the interposer's launch gate and the experiment's program engine both call: the
/// experiment runs the interposer's constants (five measured launches, a 2 ms idle
/// hold; before item 11 its gate gave an idle slice back at once), and the report
/// states the hold with its history and its sensitivity.
#[test]
fn the_experiment_runs_the_interposers_gate_rule() {
    use tessera_core::gate::SliceRule;
    use tessera_sim::experiments::fairgv::setting::{Constants, Scheduler};
    use tessera_sim::programs::{Device, Gate};
    let k = Constants::DEFAULT;
    assert_eq!(
        (k.samples, k.idle_hold),
        (SliceRule::DEFAULT.measured, SliceRule::DEFAULT.idle_hold)
    );
    let Device::Queue(q) = Scheduler::FairGv.node(&k, 2).device else {
        panic!("not the queue device")
    };
    let Gate::Collaborative { rule, work_conserving: true, .. } = q.gate else {
        panic!("FairGV's gate: {:?}", q.gate)
    };
    assert_eq!(rule, SliceRule::DEFAULT);
    let r = short();
    assert_eq!(r.constants.idle_hold, SliceRule::DEFAULT.idle_hold);
    let text = report(r);
    assert!(text.contains("**The gate's idle hold**"), "{text}");
    assert!(r.sensitivity.iter().any(|v| v.constant == "idle_hold"), "no idle_hold sensitivity");
}

/// Issue 58 item 5: FairGV's VMs are coscheduled as the daemon does it (a boost of
/// their threads for their quantum, `Coscheduling::Boost`, by the core's
/// `BOOST_NICE`), with the paper's KVM wake-up and none as the sensitivity's values.
#[test]
fn the_experiment_coschedules_as_the_daemon_does() {
    use tessera_sim::experiments::fairgv::setting::{Constants, FairgvCosched, Scheduler};
    use tessera_sim::programs::Coscheduling;
    let k = Constants::DEFAULT;
    assert_eq!(k.coscheduling, FairgvCosched::Daemon);
    for s in [Scheduler::FairGv, Scheduler::FairGvNonWorkConserving] {
        assert_eq!(s.node(&k, 2).coscheduling, Coscheduling::Boost);
    }
    let r = short();
    let v = r.sensitivity.iter().find(|v| v.constant == "coscheduling").expect("varied");
    assert_eq!(v.values, ["paper", "daemon", "off"]);
}

/// Issue 57 item 10: one-sided tests passed the wrong side. A foreground that takes 89%
/// of the GPU beside a 21 µs background (normalized run time 1.12, under the equal
/// share's 2.0) and an overhead below the ideal (0.778) now fail; Credit-hs's overhead
/// claims name their mechanism (vCPU switches); claims that cannot fail are structural
/// and out of the tally.
#[test]
fn fairgvs_claims_are_two_sided_and_name_their_mechanism() {
    use tessera_sim::experiments::claims::{ClaimKind, Verdict};
    use tessera_sim::experiments::fairgv::judge;
    let verdict = |r: &FairgvResults, id: &str| {
        judge(r).into_iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no {id}")).verdict
    };
    let mut r = short().clone();
    for x in r.collaborative.iter_mut().filter(|x| x.scheduler == "FairGV") {
        x.normalized_run_time = 2.0;
    }
    assert_eq!(verdict(&r, "fig11-fairgv-robust"), Verdict::Holds);
    r.collaborative.iter_mut().find(|x| x.scheduler == "FairGV").unwrap().normalized_run_time =
        1.12;
    assert_eq!(verdict(&r, "fig11-fairgv-robust"), Verdict::DoesNotHold);
    let mut r = short().clone();
    for x in r.rows.iter_mut().filter(|x| x.setup == "congested" && x.scheduler == "FairGV") {
        x.overhead = 1.0;
    }
    assert_eq!(verdict(&r, "fig9-overhead"), Verdict::Holds);
    // the paper's <= 1.02 is judged as it stands (issue 57: 1.048 passed a +-0.04 band)
    for x in r.rows.iter_mut().filter(|x| x.setup == "congested" && x.scheduler == "FairGV") {
        x.overhead = 1.048;
    }
    assert_eq!(verdict(&r, "fig9-overhead"), Verdict::DoesNotHold);
    for x in r.rows.iter_mut().filter(|x| x.setup == "congested" && x.scheduler == "FairGV") {
        x.overhead = 1.02;
    }
    assert_eq!(verdict(&r, "fig9-overhead"), Verdict::Holds);
    r.rows
        .iter_mut()
        .find(|x| x.setup == "congested" && x.scheduler == "FairGV" && x.benchmark == "SRD1")
        .unwrap()
        .overhead = 0.778;
    assert_eq!(verdict(&r, "fig9-overhead"), Verdict::DoesNotHold);
    let claims = judge(short());
    for id in ["fig8-credit-hs-srd1-switches", "fig9-credit-hs-srd1-switches"] {
        assert!(claims.iter().any(|c| c.id == id), "{id}");
    }
    for id in [
        "fig10-wc-gain",
        "fig10-non-wc-falls",
        "table4-larger-cheaper",
        "fig8-credit-non-interactive-overhead",
    ] {
        let c = claims.iter().find(|c| c.id == id).unwrap();
        assert!(matches!(c.kind, ClaimKind::Structural { .. }), "{id} is counted");
    }
    // Table 4's predicted rows one by one, and Figure 11 whole
    assert_eq!(claims.iter().filter(|c| c.id.starts_with("table4-810000-")).count(), 8);
    assert!(claims.iter().any(|c| c.id == "fig11-credit-rises"));
    assert!(claims.iter().any(|c| c.id == "fig9-strict-favours-heavy"));
}

/// Issue 57 item 10: Figure 7 / §5.2's standalone overhead is judged, two-sided: FairGV
/// alone within 1.0 +- 0.05 of the native run, so a gate that costs a program alone 10%
/// fails, and so would a run faster than native (no speedup is modelled); the report
/// names §5.2's statements it does not judge and why.
#[test]
fn figure_7s_standalone_overhead_is_judged_two_sided() {
    use tessera_sim::experiments::claims::Verdict;
    use tessera_sim::experiments::fairgv::judge;
    let verdict = |r: &FairgvResults| {
        judge(r).into_iter().find(|c| c.id == "fig7-fairgv-standalone").expect("judged").verdict
    };
    let fairgv = |r: &FairgvResults| {
        r.rows
            .iter()
            .filter(|x| x.setup == "non-congested" && x.scheduler == "FairGV")
            .map(|x| x.standalone)
            .collect::<Vec<_>>()
    };
    let ours = fairgv(short());
    assert_eq!(ours.len(), 4, "MM, HS, BS and SRD1 alone: {ours:?}");
    assert!(ours.iter().all(|x| *x >= 1.0 - 1e-9), "nothing runs faster than native: {ours:?}");
    let mut r = short().clone();
    let set = |r: &mut FairgvResults, v: f64| {
        let x = r
            .rows
            .iter_mut()
            .find(|x| x.setup == "non-congested" && x.scheduler == "FairGV" && x.benchmark == "HS")
            .unwrap();
        x.standalone = v;
    };
    for x in r.rows.iter_mut() {
        x.standalone = 1.0;
    }
    assert_eq!(verdict(&r), Verdict::Holds);
    set(&mut r, 1.1);
    assert_eq!(verdict(&r), Verdict::DoesNotHold);
    set(&mut r, 0.9);
    assert_eq!(verdict(&r), Verdict::DoesNotHold);
    set(&mut r, 1.04);
    assert_eq!(verdict(&r), Verdict::Holds);
    let text = report(short());
    assert!(text.contains("Not judged"), "the report lists what it leaves out");
    assert!(text.contains("GVirtuS"), "Figure 2 / §5.2's trapping comparisons named");
}

/// Issue 58 item 5: the experiment runs kernel slicing as the interposer plans it, on
/// the scheduler it judges (FairGV's node and constants): a VM's 10 s kernels beside
/// another's 1 ms ones, weights 1:1 — the short VM's share near nothing whole, half
/// sliced — and the report says so.
#[test]
fn the_experiment_slices_a_long_kernel_as_the_interposer_does() {
    let r = short();
    let lk = r.long_kernel.as_ref().expect("the long-kernel runs");
    assert_eq!(lk.sub_kernels, 540, "900 x 900 blocks in sub-kernels of 1,500");
    let share = |sliced| lk.runs.iter().find(|x| x.sliced == sliced).unwrap().short_share;
    assert!(share(false) < 0.05, "{lk:?}");
    assert!((share(true) - 0.5).abs() <= 0.1, "{lk:?}");
    assert!(report(r).contains("## A long kernel beside short ones"));
}

/// Issue 57 item 10: Figure 11's mechanism under FairGV is named with the run's numbers:
/// the foreground's share of the GPU's busy time, the GPU's busy share of the run split
/// between the two, and that the fairness is in slice time.
#[test]
fn figure_11s_mechanism_is_named_with_its_numbers() {
    let r = short();
    let x = r
        .collaborative
        .iter()
        .find(|x| x.scheduler == "FairGV")
        .expect("a FairGV row of Figure 11");
    assert!(x.gpu_busy > 0.0 && x.gpu_busy <= 1.0, "{x:?}");
    let text = report(r);
    let share =
        format!("the foreground has {:.1}% of the GPU's busy time", 100.0 * x.foreground_gpu_share);
    assert!(text.contains(&share), "{text}");
    assert!(text.contains("FairGV's fairness here is in slice time"), "{text}");
}

/// Issue 57 item 10: `fig9-overhead`'s reading names the benchmark's own cost run alone
/// as the cause only when its overhead under congestion is within a point of it.
#[test]
fn the_congested_overheads_reading_concludes_from_its_numbers() {
    use tessera_sim::experiments::claims::Verdict;
    let with = |delta: f64| {
        let mut r = short().clone();
        let alone = r
            .rows
            .iter()
            .find(|x| x.setup == "non-congested" && x.scheduler == "FairGV" && x.benchmark == "BS")
            .expect("BS alone")
            .standalone;
        for x in r.rows.iter_mut().filter(|x| x.setup == "congested" && x.scheduler == "FairGV") {
            x.overhead = if x.benchmark == "BS" { alone + delta } else { 1.01 };
        }
        for c in &mut r.claims {
            c.verdict = Verdict::DoesNotHold;
        }
        report(&r)
    };
    assert!(with(0.005).contains("is what it costs run alone under FairGV"));
    assert!(!with(0.05).contains("is what it costs run alone under FairGV"));
}
